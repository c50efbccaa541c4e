"""Enqueue joins the caller's own transaction: the job exists iff the caller commits.

The connection is the driver's own type, so this file builds one per backend.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import psycopg
import pytest

from kiln._errors import StoreError, UnreachableError
from kiln._job import JobFilter
from kiln.stores import Store
from tests.stores.factories import job


def _connect(backend: str, store: Store) -> Any:
    if backend == "sqlite":
        conn = sqlite3.connect(store.url[len("sqlite:///"):], isolation_level=None)
        conn.execute("BEGIN")
        return conn
    if backend == "postgresql":
        return psycopg.connect(store.url)  # not autocommit: a transaction starts
    if backend == "mysql":
        import pymysql

        return pymysql.connect(**_mysql_args(store.url))  # autocommit off: a transaction
    pytest.skip(f"{backend}: no transaction-joining test yet")


def _mysql_args(url: str) -> dict[str, Any]:
    from urllib.parse import urlsplit

    p = urlsplit(url)
    return {"host": p.hostname, "port": p.port or 3306, "user": p.username or "root",
            "password": p.password or "", "database": p.path.lstrip("/")}


@pytest.mark.parametrize("commit", [True, False])
async def test_sync_insert_joins_the_callers_transaction(
    store: Store, backend: str, commit: bool
) -> None:
    conn = _connect(backend, store)
    try:
        ids = store.job_insert_many_sync([job(), job()], conn)
        assert await store.job_count(JobFilter()) == 0  # not visible before the commit
        conn.commit() if commit else conn.rollback()
    finally:
        conn.close()
    assert await store.job_count(JobFilter(ids=tuple(ids))) == (2 if commit else 0)


@pytest.mark.parametrize("commit", [True, False])
async def test_async_insert_joins_the_callers_transaction(
    store: Store, backend: str, commit: bool
) -> None:
    if backend == "mysql":
        import asyncmy

        my = await asyncmy.connect(**_mysql_args(store.url), autocommit=False)
        try:
            ids = await store.job_insert_many([job(depends_on=[]), job(delay=5)], my)
            assert await store.job_count(JobFilter()) == 0
            await (my.commit() if commit else my.rollback())
        finally:
            await my.ensure_closed()
        assert await store.job_count(JobFilter(ids=tuple(ids))) == (2 if commit else 0)
        return
    if backend != "postgresql":
        pytest.skip(f"{backend}: the driver has no async connection to join")
    async with await psycopg.AsyncConnection.connect(store.url) as conn:
        ids = await store.job_insert_many([job(depends_on=[]), job(delay=5)], conn)
        assert await store.job_count(JobFilter()) == 0
        await (conn.commit() if commit else conn.rollback())
    assert await store.job_count(JobFilter(ids=tuple(ids))) == (2 if commit else 0)


async def test_a_foreign_connection_type_is_refused(store: Store) -> None:
    with pytest.raises(TypeError):
        await asyncio.to_thread(store.job_insert_many_sync, [job()], object())


async def test_driver_errors_are_translated(store: Store) -> None:
    try:
        got = await store.job_get(2**70)  # beyond 64 bits: no such job, or a StoreError
    except StoreError as exc:
        assert exc.operation == "job_get" and exc.__cause__ is not None
    else:
        assert got is None


def test_postgres_error_translation() -> None:
    from kiln._errors import NotMigratedError
    from kiln.stores.postgres._errors import translate

    url = "postgresql://u:secret@db.example:6543/app"
    missing = translate("job_get", url, psycopg.errors.UndefinedTable("no kiln_jobs"))
    assert isinstance(missing, NotMigratedError) and "kiln migrate" in str(missing)
    gone = translate("job_get", url, psycopg.OperationalError("connection refused"))
    assert isinstance(gone, UnreachableError) and "db.example:6543" in str(gone)
    assert "secret" not in str(gone)
    other = translate("job_get", url, psycopg.errors.NumericValueOutOfRange("too big"))
    assert type(other) is StoreError and other.operation == "job_get"


async def test_query_count_counts_statements(store: Store) -> None:
    before = store.query_count()
    await store.job_count(JobFilter())
    await store.job_insert_many([job()])
    assert store.query_count() >= before + 2


async def test_unreachable_postgres_names_host_and_port() -> None:
    from kiln.stores.postgres import PostgresStore

    store = PostgresStore("postgresql://postgres@127.0.0.1:1/test", connect_timeout=1)
    with pytest.raises(UnreachableError, match=r"127\.0\.0\.1:1\b"):
        await store.open()
    with pytest.raises(UnreachableError, match=r"127\.0\.0\.1:1\b"):
        await asyncio.to_thread(store.job_insert_many_sync, [job()])
    await store.close()
