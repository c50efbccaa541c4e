"""SQLite statements for rate limits: declaring keys and admitting pending jobs.

Write operations are called through ``_plan.write``, which wraps them in BEGIN IMMEDIATE,
so the write lock is taken before anything is read and "now" is read after it.
"""

from __future__ import annotations

import sqlite3
import time

from kiln._job import Admission, AdmitResult, RateLimit


# rate limits -------------------------------------------------------------------------
def rate_limit_declare(conn: sqlite3.Connection, key: str, limit: RateLimit) -> None:
    conn.execute(
        "INSERT INTO kiln_rate_limits (key, rate, per, burst, tokens, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET rate = excluded.rate,"
        " per = excluded.per, burst = excluded.burst"
        " WHERE rate != excluded.rate OR per != excluded.per OR burst != excluded.burst",
        (key, limit.rate, limit.per, limit.burst, float(max(limit.burst, 1)), time.time()),
    )


def rate_keys_pending(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT DISTINCT rate_key FROM kiln_jobs WHERE state = 'pending' AND run_at <= ?",
        (time.time(),),
    ).fetchall()
    return [str(r[0]) for r in rows]


def admit(conn: sqlite3.Connection, key: str, max_batch: int) -> AdmitResult:
    from kiln.stores._admission import plan

    limit_row = conn.execute(
        "SELECT rate, per, burst, tokens, updated_at FROM kiln_rate_limits WHERE key = ?", (key,)
    ).fetchone()
    now = time.time()  # read after BEGIN IMMEDIATE took the lock
    if limit_row is None:
        return AdmitResult(admitted=[], next_at=None, declared=False)
    limit = RateLimit(rate=limit_row[0], per=limit_row[1], burst=limit_row[2])
    in_window = int(
        conn.execute(
            "SELECT COUNT(*) FROM kiln_jobs WHERE rate_key = ? AND admitted_at > ?",
            (key, now - limit.per),
        ).fetchone()[0]
    )
    oldest_in_window = conn.execute(
        "SELECT admitted_at FROM kiln_jobs WHERE rate_key = ? AND admitted_at > ?"
        " ORDER BY admitted_at LIMIT 1",
        (key, now - limit.per),
    ).fetchone()
    pending = conn.execute(
        "SELECT id, queue, kind, created_at FROM kiln_jobs WHERE rate_key = ? AND state = 'pending'"
        " AND run_at <= ? ORDER BY priority, run_at, id LIMIT ?",
        (key, now, max_batch),
    ).fetchall()
    decision = plan(
        limit, limit_row[3], limit_row[4], now, in_window, len(pending),
        None if oldest_in_window is None else oldest_in_window[0],
    )
    chosen = pending[: decision.admit]
    if chosen:
        marks = ",".join("?" * len(chosen))
        conn.execute(
            "UPDATE kiln_jobs SET state = 'available', admitted_at = ?, run_at = ?"
            f" WHERE id IN ({marks})",
            [now, now, *[r[0] for r in chosen]],
        )
    conn.execute(
        "UPDATE kiln_rate_limits SET tokens = ?, updated_at = ? WHERE key = ?",
        (decision.tokens, now, key),
    )
    admitted = [
        Admission(job_id=r[0], queue=r[1], kind=r[2], delay=max(now - r[3], 0.0)) for r in chosen
    ]
    more = len(pending) > len(chosen) or conn.execute(
        "SELECT 1 FROM kiln_jobs WHERE rate_key = ? AND state = 'pending' LIMIT 1", (key,)
    ).fetchone() is not None
    return AdmitResult(admitted=admitted, next_at=decision.next_at if more else None)


def rate_limit_list(conn: sqlite3.Connection) -> list[tuple[str, RateLimit, int]]:
    rows = conn.execute(
        "SELECT r.key, r.rate, r.per, r.burst, (SELECT COUNT(*) FROM kiln_jobs j"
        " WHERE j.rate_key = r.key AND j.state = 'pending') FROM kiln_rate_limits r ORDER BY r.key"
    ).fetchall()
    return [(r[0], RateLimit(rate=r[1], per=r[2], burst=r[3]), int(r[4])) for r in rows]
