"""Enqueue joins the caller's own transaction: the job exists iff the caller commits.
A batch joins it whole (none of a failed batch stays, even if the caller commits), and
a connection with no transaction open gets one of its own per insert.

The connection is the driver's own type, so this file builds one per backend.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import psycopg
import pytest

from kiln import KilnError, Unique
from kiln._errors import StoreError, UnreachableError
from kiln._model._build import build_job
from kiln._model._job import JobFilter, NewJob
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


def _autocommit(backend: str, store: Store) -> Any:
    """A caller's connection in autocommit mode, with no transaction open."""
    if backend == "sqlite":
        return sqlite3.connect(store.url[len("sqlite:///"):], isolation_level=None)
    if backend == "postgresql":
        return psycopg.connect(store.url, autocommit=True)
    import pymysql

    return pymysql.connect(**_mysql_args(store.url), autocommit=True)


def _mixed(tag: str) -> list[NewJob]:
    """Plain jobs, a unique one, and one that runs after the first: several statements."""
    unique = build_job(tag, {"tenant": tag}, None, queue="q", unique=Unique())
    return [job(kind=tag), unique, job(kind=tag, after=(0,))]


def _failing(tag: str) -> list[NewJob]:
    """_mixed, then a job no store writes (no queue: NOT NULL) in the batch's last level."""
    bad = job(kind=tag, after=(2,))
    bad.queue = None  # type: ignore[assignment]
    return [*_mixed(tag), bad]


@pytest.mark.parametrize("commit", [True, False])
async def test_a_mixed_batch_joins_the_callers_transaction_whole(
    store: Store, backend: str, commit: bool
) -> None:
    conn = _connect(backend, store)
    try:
        ids = store.job_insert_many_sync(_mixed("m"), conn)
        assert await store.job_count(JobFilter()) == 0
        conn.commit() if commit else conn.rollback()
    finally:
        conn.close()
    assert await store.job_count(JobFilter(ids=tuple(int(i) for i in ids))) == (3 if commit else 0)


async def test_a_batch_that_fails_inside_the_callers_transaction_leaves_none_of_it(
    store: Store, backend: str
) -> None:
    """The caller catches the error and commits what it wrote before: none of the
    failed batch's rows go with it (a savepoint on MySQL and SQLite; on PostgreSQL the
    error aborts the caller's transaction, so its commit writes nothing at all)."""
    conn = _connect(backend, store)
    try:
        store.job_insert_many_sync([job(kind="before")], conn)
        with pytest.raises(KilnError):
            store.job_insert_many_sync(_failing("f"), conn)
        conn.commit()
    finally:
        conn.close()
    assert await store.job_count(JobFilter(kind="f")) == 0
    kept = 0 if backend == "postgresql" else 1
    assert await store.job_count(JobFilter(kind="before")) == kept


async def test_a_connection_in_autocommit_mode_gets_a_transaction_of_its_own(
    store: Store, backend: str
) -> None:
    conn = _autocommit(backend, store)
    try:
        with pytest.raises(KilnError):
            store.job_insert_many_sync(_failing("f"), conn)
        assert await store.job_count(JobFilter()) == 0  # none of the batch, not its start
        ids = store.job_insert_many_sync(_mixed("m"), conn)
        assert await store.job_count(JobFilter()) == 3  # committed at once: nobody else would
    finally:
        conn.close()
    assert sorted(int(i) for i in ids) == sorted(j.id for j in await store.job_list(JobFilter()))


async def test_a_legacy_sqlite_connection_with_nothing_open_still_decides(
    store: Store, backend: str
) -> None:
    """The sqlite3 module's default mode opens a transaction before an INSERT: the
    enqueue opens it (so the caller's rollback still undoes it), not a savepoint that
    would commit at once."""
    if backend != "sqlite":
        pytest.skip(f"{backend}: the sqlite3 module's transaction mode only")
    conn = sqlite3.connect(store.url[len("sqlite:///"):])
    try:
        store.job_insert_many_sync(_mixed("m"), conn)
        assert conn.in_transaction
        conn.rollback()
    finally:
        conn.close()
    assert await store.job_count(JobFilter()) == 0


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


class _Untold:
    """A DB-API connection whose driver does not tell whether a transaction is open
    (as mysqlclient's): kiln asks the server (MariaDB's @@in_transaction)."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def cursor(self) -> Any:
        return self._conn.cursor()

    def commit(self) -> None:
        self._conn.commit()

    def get_autocommit(self) -> bool:
        return bool(self._conn.get_autocommit())


@pytest.mark.parametrize("opened", [False, True], ids=["none-open", "start-transaction"])
async def test_mysql_asks_the_server_when_the_driver_cannot_tell(
    store: Store, backend: str, opened: bool
) -> None:
    if backend != "mysql":
        pytest.skip(f"{backend}: MySQL drivers only")
    conn = _autocommit(backend, store)
    untold = _Untold(conn)
    try:
        if opened:  # the caller's own transaction on an autocommit connection
            conn.cursor().execute("START TRANSACTION")
            store.job_insert_many_sync([job(kind="before")], untold)
        with pytest.raises(KilnError):
            store.job_insert_many_sync(_failing("f"), untold)
        if opened:
            conn.commit()
    finally:
        conn.close()
    assert await store.job_count(JobFilter(kind="f")) == 0
    assert await store.job_count(JobFilter(kind="before")) == (1 if opened else 0)
