"""Conformance: ``table_sizes()``, the jobs table's size from catalog statistics.

Every store reports kiln_jobs with a row estimate and a size; PostgreSQL also reports
dead tuples, MariaDB and SQLite the free space inside the table or file. The estimate
follows inserts once the database's statistics are refreshed (ANALYZE on PostgreSQL
and MariaDB; SQLite's id span needs nothing), and PostgreSQL's dead tuples follow a
delete that vacuum has not yet reclaimed.
"""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

import psycopg
import pytest

from kiln.stores import Store, TableSize
from tests.plugins.databases import mysql_connect
from tests.stores.factories import insert, job
from tests.support.waits import wait_for


def execute(store_url: str, sql: str) -> None:
    """One statement on a connection of its own, outside the store."""
    parts = urlsplit(store_url)
    if parts.scheme.startswith("postgres"):
        with psycopg.connect(store_url, autocommit=True) as pg:
            pg.execute(sql)
            pg.execute("SELECT pg_stat_force_next_flush()")
    elif parts.scheme.startswith("mysql"):
        my = mysql_connect(store_url)
        with contextlib.closing(my), my.cursor() as cur:
            cur.execute(sql)


async def jobs_size(store: Store) -> TableSize:
    sizes = await store.table_sizes()
    assert [s.table for s in sizes] == ["kiln_jobs"]
    return sizes[0]


async def test_empty_table_is_reported(store: Store, backend: str) -> None:
    size = await jobs_size(store)
    assert size.rows == 0
    assert size.bytes > 0  # the table's (or file's) pages exist before any row
    assert (size.dead_rows is not None) == backend.startswith("postgres")
    assert (size.free_bytes is not None) == (not backend.startswith("postgres"))


async def test_row_estimate_follows_inserts(store: Store, store_url: str) -> None:
    empty = await jobs_size(store)
    await insert(store, *[job(args={"n": i, "pad": "x" * 200}) for i in range(300)])
    execute(store_url, "ANALYZE TABLE kiln_jobs" if store_url.startswith("mysql")
            else "ANALYZE kiln_jobs")
    size = await jobs_size(store)
    assert size.rows == 300
    assert size.bytes >= empty.bytes


@pytest.mark.fresh_database  # a pooled table keeps the dead rows of the tests before
async def test_postgres_counts_dead_tuples(store: Store, store_url: str, backend: str) -> None:
    if not backend.startswith("postgres"):
        return  # only PostgreSQL keeps dead tuples in the table until vacuum
    ids = await insert(store, *[job() for _ in range(40)])
    execute(store_url, "ALTER TABLE kiln_jobs SET (autovacuum_enabled = false)")
    execute(store_url, f"DELETE FROM kiln_jobs WHERE id <= {ids[24]}")

    async def dead() -> bool:
        return (await jobs_size(store)).dead_rows == 25

    await wait_for(dead, 3.0, "dead()")
    execute(store_url, "VACUUM kiln_jobs")
    assert (await jobs_size(store)).dead_rows == 0
