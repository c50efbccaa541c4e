"""SQLite's work for a read, in hundreds of VM instructions (a progress handler): what
the plan tests compare between an old statement and a new one, or one read at two
table sizes, where timings would move with the machine's load."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any


def counted(conn: sqlite3.Connection, read: Callable[[], Any]) -> tuple[int, Any]:
    """Hundreds of VM instructions ``read`` ran on ``conn``, and what it returned."""
    count = 0

    def tick() -> int:
        nonlocal count
        count += 1
        return 0

    conn.set_progress_handler(tick, 100)
    try:
        got = read()
    finally:
        conn.set_progress_handler(None, 0)
    return count, got


def steps(
    conn: sqlite3.Connection, sql: str | Callable[[], Sequence[Any]],
    params: tuple[object, ...] = (),
) -> tuple[int, list[tuple[object, ...]]]:
    """Hundreds of VM instructions ``sql`` (or a read of several statements) ran, and
    its rows in the order it gave them."""
    count, got = counted(conn, sql if callable(sql)
                         else lambda: conn.execute(sql, params).fetchall())
    return count, [tuple(r) for r in got]
