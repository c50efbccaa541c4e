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


def batches(conn: sqlite3.Connection, runner: Runner[T]) -> T:
    """Run a statement-batch runner (the migration runner, kiln.stores._migrations):
    each statement answered with its first value."""
    return execute(runner, lambda batch: [_first(conn.execute(sql)) for sql in batch])


def _first(cur: sqlite3.Cursor) -> Any:
    row = cur.fetchone()
    return None if row is None else row[0]
