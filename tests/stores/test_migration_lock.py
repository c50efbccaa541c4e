"""The migration lock is taken only when there is something to apply.

A server starting, a client opening, ``kiln migrate`` run again: on a database already
at the latest version ``migrate()`` applies nothing, so it does not wait for the
migration lock, which another run may hold for minutes (an index built CONCURRENTLY on
a big table) or a session that stopped answering may hold until the database notices.
A database behind the latest version still waits for the lock, as before.
PostgreSQL (a session advisory lock per schema) and MariaDB (a named lock per database);
SQLite's lock is its write transaction.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest

from kiln.stores import _migrations
from tests.plugins.databases import mysql_connect
from tests.support.stores import migrate

WAITED = 10.0  # seconds: far less than the lock's wait (PostgreSQL 600 s, MariaDB 60 s)


pytestmark = pytest.mark.parametrize("database_backend", ["postgres", "mysql"])


@pytest.fixture
def url(empty_store_url: str) -> str:
    return empty_store_url


@contextmanager
def holding_the_lock(url: str, backend: str) -> Iterator[Any]:
    """Another session holds ``url``'s migration lock until the block ends."""
    if backend == "postgresql":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(725031161, hashtext(current_schema()))")
            yield conn
        return
    conn = mysql_connect(url)
    with conn, conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(CONCAT('kiln_migrate.', DATABASE()), 0)")
        assert cur.fetchone()[0] == 1
        yield conn


def forget_latest(url: str, backend: str) -> int:
    """Take the latest version's row out of kiln_migrations (its statements are safe to
    run again): the database is one version behind; the version it is behind by."""
    dialect = _migrations.POSTGRES if backend == "postgresql" else _migrations.MYSQL
    latest = _migrations.latest(dialect.package)
    sql = f"DELETE FROM kiln_migrations WHERE version = {latest}"
    if backend == "postgresql":
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql)
    else:
        with mysql_connect(url) as conn, conn.cursor() as cur:
            cur.execute(sql)
    return latest


async def test_an_up_to_date_database_does_not_wait_for_the_lock(url: str, backend: str) -> None:
    assert await migrate(url)  # every version, from empty
    with holding_the_lock(url, backend):
        # before: a start-up polled the lock for up to 600 s (PostgreSQL) or waited 60 s
        # and failed (MariaDB) while a long migration, or a dead session, held it
        assert await asyncio.wait_for(migrate(url), WAITED) == []


async def test_a_database_behind_waits_for_the_lock(url: str, backend: str) -> None:
    assert await migrate(url)
    behind = forget_latest(url, backend)
    with holding_the_lock(url, backend):
        task = asyncio.create_task(migrate(url))
        done, _ = await asyncio.wait([task], timeout=1.0)
        assert not done, "a migration ran while another held the lock"
    assert await asyncio.wait_for(task, WAITED) == [behind]
