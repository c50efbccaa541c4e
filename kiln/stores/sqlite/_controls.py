"""SQLite statements for queue controls: pause, resume, concurrency limits (kiln._model._controls).

Each change runs in one write transaction with its audit row (the caller's
``_plan.write``). Claims check the pauses themselves (_jobs.claim).
"""

from __future__ import annotations

import sqlite3
import time

from kiln._model._controls import ALL, QueueControls, from_rows
from kiln.stores._rows import dumps, ts_required


def _audit(conn: sqlite3.Connection, actor: str, action: str, n: int, detail: object) -> None:
    conn.execute(
        "INSERT INTO kiln_audit (at, actor, action, count, detail) VALUES (?, ?, ?, ?, ?)",
        (time.time(), actor, action, n, dumps(detail)),
    )


def pause(conn: sqlite3.Connection, queue: str, actor: str) -> bool:
    cur = conn.execute(
        "INSERT INTO kiln_queue_pauses (queue, paused_at, paused_by) VALUES (?, ?, ?)"
        " ON CONFLICT (queue) DO NOTHING", (queue, time.time(), actor),
    )
    _audit(conn, actor, "queue_pause", cur.rowcount, {"queue": queue})
    return cur.rowcount == 1


def resume(conn: sqlite3.Connection, queue: str, actor: str) -> int:
    if queue == ALL:
        cur = conn.execute("DELETE FROM kiln_queue_pauses")
    else:
        cur = conn.execute("DELETE FROM kiln_queue_pauses WHERE queue = ?", (queue,))
    _audit(conn, actor, "queue_resume", cur.rowcount, {"queue": queue})
    return cur.rowcount


def limit_set(
    conn: sqlite3.Connection, queue: str, server_id: str, concurrency: int | None, actor: str
) -> None:
    if concurrency is None:
        conn.execute("DELETE FROM kiln_queue_limits WHERE queue = ? AND server_id = ?",
                     (queue, server_id))
    else:
        conn.execute(
            "INSERT INTO kiln_queue_limits (queue, server_id, concurrency, set_at, set_by)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (queue, server_id) DO UPDATE SET"
            " concurrency = excluded.concurrency, set_at = excluded.set_at,"
            " set_by = excluded.set_by",
            (queue, server_id, concurrency, time.time(), actor),
        )
    detail = {"queue": queue, "server": server_id or None, "concurrency": concurrency}
    _audit(conn, actor, "queue_concurrency", 1, detail)


CONTROLS = (
    "SELECT 'p', queue, '', 0, paused_at, paused_by FROM kiln_queue_pauses UNION ALL"
    " SELECT 'l', queue, server_id, concurrency, set_at, set_by FROM kiln_queue_limits"
    " ORDER BY 1 DESC, 2, 3"
)


def controls(conn: sqlite3.Connection) -> QueueControls:
    """One statement (servers poll it): pauses and limits, padded to one shape."""
    return from_rows(conn.execute(CONTROLS).fetchall(), ts_required)
