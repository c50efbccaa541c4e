"""SQLite operations for cancelling jobs, running ones included.

Owns the cancel statement, which records who cancelled, and the read by which a server
learns which of its running jobs were cancelled. SQLite has no notifications: the
client wakes the servers through a Bus, or they look once per heartbeat_interval.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from kiln._model._job import CancelRequest, JobFilter
from kiln.stores._filters import CANCELLABLE
from kiln.stores.sqlite._admin import where

# the record of who cancelled, in the shape of an AttemptError (kiln._model._job); column
# references on the right of SET read the row before the update
RECORD = (
    "json_object('attempt', attempt, 'at', ?, 'error', ?, 'traceback', '',"
    " 'server_id', CASE WHEN state = 'running' THEN server_id END)"
)


def cancel(conn: sqlite3.Connection, f: JobFilter, actor: str | None) -> int:
    cond, params = where(f, CANCELLABLE)
    now = time.time()
    record = "" if actor is None else f", errors = json_insert(errors, '$[#]', {RECORD})"
    message = [] if actor is None else [now, f"Cancelled by {actor}"]
    cur = conn.execute(
        "UPDATE kiln_jobs SET state = 'cancelled', finished_at = ?,"
        f" attempt_running = (state = 'running'){record} WHERE {cond}",
        [now, *message, *params],
    )
    return cur.rowcount


def cancel_requested(conn: sqlite3.Connection, job_ids: Sequence[int]) -> list[CancelRequest]:
    found: list[CancelRequest] = []
    now = time.time()
    for start in range(0, len(job_ids), 500):
        chunk = list(job_ids[start : start + 500])
        rows = conn.execute(
            "SELECT id, attempt, server_id, finished_at FROM kiln_jobs WHERE id IN"
            f" ({','.join('?' * len(chunk))}) AND state = 'cancelled' AND attempt_running",
            chunk,
        ).fetchall()
        found.extend(CancelRequest(int(r[0]), int(r[1]), r[2], max(now - float(r[3]), 0.0))
                     for r in rows)
    return found
