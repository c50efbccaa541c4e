"""SQLite statements for rate limits: declaring keys and admitting pending jobs.

Write operations are called through ``_plan.write``, which wraps them in BEGIN IMMEDIATE,
so the write lock is taken before anything is read and "now" is read after it.
"""

from __future__ import annotations

import sqlite3
import time

from kiln._model._job import Admission, AdmitResult, RateLimit
from kiln.stores._admission import MICRO, most, plan

# rate limits -------------------------------------------------------------------------
# The keys with pending jobs due now, by a loose index scan of kiln_jobs_pending (one
# probe per key, then one for a due job of it): work per call grows with the keys that
# have pending jobs, not with the pending jobs (tests/flow/test_admission_cost.py).
# INDEXED BY: without statistics SQLite takes the state index and sorts the backlog.
KEYS_PENDING = (
    "WITH RECURSIVE k(key) AS (SELECT (SELECT rate_key FROM kiln_jobs INDEXED BY"
    " kiln_jobs_pending WHERE state = 'pending' AND rate_key IS NOT NULL ORDER BY rate_key"
    " LIMIT 1) UNION ALL SELECT (SELECT j.rate_key FROM kiln_jobs j INDEXED BY"
    " kiln_jobs_pending WHERE j.state = 'pending'"
    " AND j.rate_key > k.key ORDER BY j.rate_key LIMIT 1) FROM k WHERE k.key IS NOT NULL)"
    " SELECT k.key FROM k WHERE k.key IS NOT NULL AND (SELECT 1 FROM kiln_jobs j"
    " WHERE j.state = 'pending' AND j.rate_key = k.key AND j.run_at <= ? LIMIT 1) = 1"
)


def rate_limit_declare(conn: sqlite3.Connection, key: str, limit: RateLimit) -> None:
    now = time.time()
    conn.execute(
        "INSERT INTO kiln_rate_limits (key, rate, per, burst, tokens, updated_at, changed_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET rate = excluded.rate,"
        " per = excluded.per, burst = excluded.burst, changed_at = excluded.changed_at"
        " WHERE rate != excluded.rate OR per != excluded.per OR burst != excluded.burst",
        (key, limit.rate, limit.per, limit.burst, float(max(limit.burst, 1)), now, now),
    )


def rate_keys_pending(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(KEYS_PENDING, (time.time(),)).fetchall()
    return [str(r[0]) for r in rows]


def admit_keys(
    conn: sqlite3.Connection, keys: list[str], max_batch: int,
    queues: list[str] | None = None, ahead: float = 0.0,
) -> dict[str, AdmitResult]:
    """Several keys under one write lock (one writer: nothing is ever busy)."""
    return {key: admit(conn, key, max_batch, queues, ahead) for key in keys}


def admit(
    conn: sqlite3.Connection, key: str, max_batch: int, queues: list[str] | None = None,
    ahead: float = 0.0,
) -> AdmitResult:
    """``queues``: admit only jobs of these (None: of any queue; []: of none);
    ``ahead``: seconds to admit ahead (kiln.stores._admission)."""
    limit_row = conn.execute(
        "SELECT rate, per, burst, tokens, updated_at, changed_at FROM kiln_rate_limits"
        " WHERE key = ?", (key,)
    ).fetchone()
    now = time.time()  # read after BEGIN IMMEDIATE took the lock
    if limit_row is None:
        return AdmitResult(admitted=[], next_at=None, declared=False)
    limit = RateLimit(rate=limit_row[0], per=limit_row[1], burst=limit_row[2])
    in_window, oldest_in_window = 0, None
    if limit_row[5] > now - limit.per:  # changed within a window: count it (_admission)
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
    in_queues = "" if queues is None else f" AND queue IN ({','.join('?' * len(queues))})"
    # no startable queue admits nothing (read nothing: an empty IN list under INDEXED BY
    # is "no query solution" to SQLite)
    pending = [] if queues == [] else conn.execute(
        # in admission order along kiln_jobs_pending_order: along kiln_jobs_pending (its
        # range on run_at looks cheaper) SQLite sorted the key's whole backlog
        "SELECT id, queue, kind, created_at FROM kiln_jobs INDEXED BY kiln_jobs_pending_order"
        " WHERE rate_key = ? AND state = 'pending'"
        f" AND run_at <= ?{in_queues} ORDER BY priority, run_at, id LIMIT ?",
        # no more than the key could admit now (a pass over 40 keys of 500 pending
        # jobs each read 20,000 rows to admit 200)
        (key, now, *(queues or ()), min(max_batch, most(limit, ahead))),
    ).fetchall()
    decision = plan(
        limit, limit_row[3], limit_row[4], now, in_window, len(pending),
        None if oldest_in_window is None else oldest_in_window[0], ahead,
    )
    chosen = pending[: decision.admit]
    times = [now + off / MICRO for off in decision.offsets]
    if chosen:
        # a job admitted ahead is scheduled at its time (the releaser makes it available)
        conn.executemany(
            "UPDATE kiln_jobs SET state = CASE WHEN ? THEN 'scheduled' ELSE 'available' END,"
            " admitted_at = ?, run_at = ? WHERE id = ?",
            [(off > 0, at, at, r[0]) for r, off, at in zip(chosen, decision.offsets, times,
                                                           strict=True)],
        )
    conn.execute(
        "UPDATE kiln_rate_limits SET tokens = ?, updated_at = ? WHERE key = ?",
        (decision.tokens, now + decision.updated / MICRO, key),
    )
    admitted = [
        Admission(job_id=r[0], queue=r[1], kind=r[2], delay=max(at - r[3], 0.0))
        for r, at in zip(chosen, times, strict=True)
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


def rate_keys_backlog(
    conn: sqlite3.Connection, limit: int
) -> list[tuple[str, RateLimit | None, int]]:
    """The keys with the most pending jobs that are due, with their limits (None:
    undeclared); one grouped read of the pending index."""
    rows = conn.execute(
        "SELECT j.rate_key, COUNT(*), r.rate, r.per, r.burst FROM kiln_jobs j"
        " LEFT JOIN kiln_rate_limits r ON r.key = j.rate_key WHERE j.state = 'pending'"
        " AND j.rate_key IS NOT NULL AND j.run_at <= ?"
        " GROUP BY j.rate_key, r.rate, r.per, r.burst ORDER BY COUNT(*) DESC, j.rate_key"
        " LIMIT ?", (time.time(), limit),
    ).fetchall()
    return [(r[0], None if r[2] is None else RateLimit(rate=r[2], per=r[3], burst=r[4]),
             int(r[1])) for r in rows]


def rate_keys_prune(
    conn: sqlite3.Connection, idle_for: float, keep: list[str], limit: int
) -> int:
    """Delete the rows of keys idle for ``idle_for`` plus a window and a full refill
    that no unfinished job uses, not in ``keep`` (one writer: nothing to lock)."""
    marks = ",".join("?" * len(keep))
    cur = conn.execute(
        "DELETE FROM kiln_rate_limits WHERE key IN (SELECT r.key FROM kiln_rate_limits r"
        " WHERE r.updated_at < ? - (? + r.per + r.per * max(r.burst, 1) * 1.0 / r.rate)"
        f" AND r.key NOT IN ({marks}) AND NOT EXISTS (SELECT 1 FROM kiln_jobs j"
        " WHERE j.rate_key = r.key AND j.state = 'pending') AND NOT EXISTS (SELECT 1"
        " FROM kiln_jobs j WHERE j.rate_key = r.key AND j.rate_key IS NOT NULL"
        " AND j.state IN ('awaiting', 'scheduled', 'available', 'running'))"
        " ORDER BY r.updated_at LIMIT ?)",
        (time.time(), idle_for, *keep, limit),
    )
    return cur.rowcount
