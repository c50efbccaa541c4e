"""PostgreSQL: applying migrations to a database in use without blocking writes.

The rules are kiln.stores._online's. This runner has a connection of its own (not the
pool's: it holds a session-level advisory lock for the whole run, and index builds run
outside any transaction):

1. a schema already at the latest version is done, with no lock taken (the shared
   runner's rule); otherwise take the schema's migration lock (a session advisory
   lock, polled: ``TRY_LOCK``) and read the applied version;
2. a database without kiln_jobs yet migrates as before, in one transaction (nothing
   can be using tables that do not exist; it is also the fastest);
3. otherwise, per pending version: its transactional statements in one transaction
   (``lock_timeout`` bounds how long a brief lock such as ADD COLUMN's may queue
   behind a long transaction, and so how long the claims queued behind it wait;
   the transaction is tried again after a pause), then its online statements one by
   one (no lock_timeout: a concurrent build waits for older transactions, blocking
   no writer), then its row in kiln_migrations.

An interrupted run leaves at most one version part-applied; the next run applies it
again: its transactional statements are idempotent, an index already built is kept
(IF NOT EXISTS), and an INVALID one is dropped and built again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import psycopg.errors

from kiln._errors import StoreError
from kiln.stores import _migrations, _online

# the migration lock of this schema: a session-level advisory lock, taken by polling
# (pg_try_advisory_lock): a run that waited in pg_advisory_lock would be a transaction
# the other run's CREATE INDEX CONCURRENTLY waits for, a deadlock; per schema, so that
# migrations of other schemas neither wait nor are waited for
TRY_LOCK = "SELECT pg_try_advisory_lock(725031161, hashtext(current_schema()))"
LOCK_WAIT = 600.0  # seconds: then another run holds the lock too long
LOCK_TIMEOUT = "2s"  # the longest a brief lock may queue (claims queue behind it)
LOCK_TRIES = 30  # then the migration fails; run it again when the long transaction ends
PAUSE = 1.0

INVALID = ("SELECT NOT i.indisvalid FROM pg_index i"
           " WHERE i.indexrelid = to_regclass(%s)")

# 0003's index, whose operator class lives in pg_trgm's schema: the file builds it in a
# DO block (fine in a transaction); online, this SELECT writes the statement instead
ERRORS_INDEX = (
    "SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS kiln_jobs_failed_errors"
    " ON kiln_jobs USING gin (lower(errors::text) %I.gin_trgm_ops)"
    " WHERE state = ''failed''', n.nspname) FROM pg_extension e"
    " JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm'"
)


def split(version: int, sql: str) -> _online.Split:
    """``sql`` of ``version`` as this runner runs it."""
    parts = _online.postgres_split(sql)
    tx, online = [], list(parts.online)
    for statement in parts.tx:
        if statement.startswith("DO") and "kiln_jobs_failed_errors" in statement:
            online.insert(0, _online.Online(ERRORS_INDEX, generate=True))
        else:
            tx.append(statement)
    return _online.Split(tx, online)


async def migrate(conninfo: str, schema: str | None, **kwargs: Any) -> list[int]:
    """Apply the pending migrations online (module docstring); the versions applied."""
    conn = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **kwargs)
    async with conn:
        if schema is not None:  # a checked name (kiln.stores.postgres._settings)
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            await conn.execute(f"SET search_path TO {schema}")
        await conn.execute("SET statement_timeout = 0")
        if await _version(conn) >= _migrations.latest(_migrations.POSTGRES.package):
            return []  # up to date: no lock to wait for (module doc)
        await _lock(conn)
        d = _migrations.POSTGRES
        have = await _version(conn)
        if have == 0 or not await _value(conn, "SELECT to_regclass('kiln_jobs') IS NOT NULL"):
            return await _in_one_transaction(conn)
        done: list[int] = []
        for version, sql in _migrations.load(d.package):
            if version <= have:
                continue
            parts = split(version, sql)
            record = d.record.format(version=int(version))
            await _transaction(conn, parts.tx + ([] if parts.online else [record]))
            for step in parts.online:
                await _online_step(conn, step)
            if parts.online:
                await conn.execute(record)
            done.append(version)
        return done


async def _lock(conn: psycopg.AsyncConnection[Any]) -> None:
    deadline = asyncio.get_running_loop().time() + LOCK_WAIT
    while not await _value(conn, TRY_LOCK):
        if asyncio.get_running_loop().time() > deadline:
            raise StoreError("migrate", "another migration held the migration lock too long")
        await asyncio.sleep(0.2)


async def _version(conn: psycopg.AsyncConnection[Any]) -> int:
    d = _migrations.POSTGRES
    return int(await _value(conn, _migrations.VERSION)) if await _value(conn, d.exists) else 0


async def _value(conn: psycopg.AsyncConnection[Any], sql: str) -> Any:
    row = await (await conn.execute(sql)).fetchone()
    return row[0] if row else None


async def _in_one_transaction(conn: psycopg.AsyncConnection[Any]) -> list[int]:
    runner = _migrations.run(_migrations.POSTGRES, lock=False)
    async with conn.transaction():
        try:
            batch = next(runner)
            while True:
                firsts = []
                for statement in batch:
                    cur = await conn.execute(statement.encode())
                    row = await cur.fetchone() if cur.description else None
                    firsts.append(row[0] if row else None)
                batch = runner.send(firsts)
        except StopIteration as stop:
            result: list[int] = stop.value
            return result


async def _transaction(conn: psycopg.AsyncConnection[Any], statements: list[str]) -> None:
    if not statements:
        return
    for attempt in range(LOCK_TRIES):
        try:
            async with conn.transaction():
                await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                for statement in statements:
                    await conn.execute(statement.encode())  # bytes: no parameters
            return
        except psycopg.errors.LockNotAvailable:
            if attempt == LOCK_TRIES - 1:
                raise
            await asyncio.sleep(PAUSE)


async def _online_step(conn: psycopg.AsyncConnection[Any], step: _online.Online) -> None:
    sql: str | None = step.sql
    if step.generate:
        sql = await _value(conn, step.sql)
        if sql is None:
            return
    assert sql is not None
    index = step.index or _online.index_of(sql)
    if index is not None and await _value_args(conn, INVALID, index):
        # an interrupted CREATE INDEX CONCURRENTLY left it INVALID: build it again
        await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}".encode())
    # no lock_timeout here: a concurrent build waits for older transactions to end,
    # blocking no writer meanwhile
    await conn.execute(sql.encode())


async def _value_args(conn: psycopg.AsyncConnection[Any], sql: str, *args: Any) -> Any:
    row = await (await conn.execute(sql, args)).fetchone()
    return row[0] if row else None
