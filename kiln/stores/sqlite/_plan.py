"""How SQLite statements run: write transactions and statement batches.

SQLite has no plans to pipeline (it is a library call away): an operation is a
function of the connection. Write operations are called through ``write``, which wraps
them in BEGIN IMMEDIATE, so the write lock is taken before anything is read and "now"
is read after it. Knows nothing about individual operations.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from kiln.stores._migrations import Runner, execute

T = TypeVar("T")


def write(conn: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn, *args)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return result


def joined(conn: sqlite3.Connection, fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` on a caller's connection, all or none, in a savepoint: inside the
    caller's transaction (which then decides), or, on a connection in autocommit mode
    with none open, as a transaction of its own. A connection in the sqlite3 module's
    legacy mode with none open gets the BEGIN the module would have sent before the
    first INSERT, so the caller's commit or rollback still decides."""
    if not conn.in_transaction and _implicit(conn):
        conn.execute("BEGIN")
    conn.execute("SAVEPOINT kiln_insert")
    try:
        result = fn(conn, *args)
    except BaseException:
        conn.execute("ROLLBACK TO kiln_insert")
        conn.execute("RELEASE kiln_insert")
        raise
    conn.execute("RELEASE kiln_insert")
    return result


def _implicit(conn: sqlite3.Connection) -> bool:
    """Whether the sqlite3 module opens transactions on this connection by itself."""
    autocommit = getattr(conn, "autocommit", -1)  # Python 3.12+: True, False or LEGACY
    if autocommit is True:
        return False
    if autocommit is False:
        return True  # pragma: no cover - a transaction is always open then
    return conn.isolation_level is not None


def batches(conn: sqlite3.Connection, runner: Runner[T]) -> T:
    """Run a statement-batch runner (the migration runner, kiln.stores._migrations):
    each statement answered with its first value."""
    return execute(runner, lambda batch: [_first(conn.execute(sql)) for sql in batch])


def _first(cur: sqlite3.Cursor) -> Any:
    row = cur.fetchone()
    return None if row is None else row[0]
