"""MySQL/MariaDB plans for rate limits: declaring a key's limit, the keys with pending
jobs, admission, and the listing.

Admission takes the key's row lock, then reads the database clock; the arithmetic is
kiln.stores._admission's. Owns these statements; the store runs the plans (see _plan).
"""

from __future__ import annotations

from datetime import datetime

from kiln._job import Admission, AdmitResult, RateLimit
from kiln.stores._admission import plan as admission_plan
from kiln.stores._rows import epoch
from kiln.stores.mysql._jobs import NOW, rate_limit_stmt
from kiln.stores.mysql._plan import Plan, Stmt, marks, one, step


# rate limits -------------------------------------------------------------------------
def rate_limit_declare(key: str, limit: RateLimit) -> Plan[None]:
    yield step(rate_limit_stmt({key: limit}), last=True)


def rate_keys_pending() -> Plan[list[str]]:
    out = yield one(
        "SELECT DISTINCT rate_key FROM kiln_jobs WHERE state = 'pending'"
        f" AND run_at <= {NOW}"
    )
    return [str(r[0]) for r in out[0].rows]


def admit(key: str, max_batch: int) -> Plan[AdmitResult]:
    """Admit what the key's bucket and window allow, under the key's row lock.

    The clock is read after the lock: ``SET @kiln_now`` is a statement of its own that
    runs once the locking SELECT before it has returned, i.e. after any wait for
    another admitter. (UTC_TIMESTAMP/NOW are fixed at the start of the statement that
    calls them, so reading the clock inside the locking statement itself would give the
    time before the wait; SYSDATE(6) would not, but it is not UTC and escapes the
    one-time-per-statement guarantee.) Every later statement uses @kiln_now.
    """
    now_sql = "CAST(@kiln_now AS DATETIME(6))"
    out = yield step(
        Stmt(
            "SELECT rate, per, burst, tokens, updated_at FROM kiln_rate_limits"
            " WHERE `key` = %s FOR UPDATE",
            (key,),
        ),
        Stmt(f"SET @kiln_now = {NOW}"),
        Stmt(
            f"SELECT {now_sql}, COUNT(j.id), MIN(j.admitted_at) FROM kiln_rate_limits r"
            " LEFT JOIN kiln_jobs j ON j.rate_key = r.`key` AND j.admitted_at >"
            f" {now_sql} - INTERVAL ROUND(r.per * 1000000) MICROSECOND WHERE r.`key` = %s",
            (key,),
        ),
        Stmt(
            "SELECT id, queue, kind, created_at FROM kiln_jobs WHERE state = 'pending'"
            f" AND rate_key = %s AND run_at <= {now_sql} ORDER BY priority, run_at, id"
            " LIMIT %s FOR UPDATE",
            (key, max_batch),
        ),
        Stmt(
            "SELECT EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'pending' AND rate_key = %s"
            f" AND run_at > {now_sql})",
            (key,),
        ),
        begin=True,
    )
    if not out[0].rows:
        return AdmitResult(admitted=[], next_at=None, declared=False)
    rate, per, burst, tokens, updated_at = out[0].rows[0]
    now: datetime = out[2].rows[0][0]
    in_window, oldest = int(out[2].rows[0][1]), out[2].rows[0][2]
    pending, later = out[3].rows, bool(out[4].rows[0][0])
    decision = admission_plan(
        RateLimit(rate=rate, per=per, burst=burst), tokens, epoch(updated_at), epoch(now),
        in_window, len(pending), None if oldest is None else epoch(oldest),
    )
    chosen = pending[: decision.admit]
    stmts = [Stmt(
        "UPDATE kiln_rate_limits SET tokens = %s, updated_at = %s WHERE `key` = %s",
        (decision.tokens, now, key),
    )]
    if chosen:
        ids = [r[0] for r in chosen]
        stmts.insert(0, Stmt(
            "UPDATE kiln_jobs SET state = 'available', admitted_at = %s, run_at = %s"
            f" WHERE id IN ({marks(len(ids))})",
            (now, now, *ids),
        ))
    yield step(*stmts, last=True)
    admitted = [
        Admission(job_id=int(r[0]), queue=r[1], kind=r[2],
                  delay=max(epoch(now) - epoch(r[3]), 0.0))
        for r in chosen
    ]
    more = len(pending) > len(chosen) or later
    return AdmitResult(admitted=admitted, next_at=decision.next_at if more else None)


def rate_limit_list() -> Plan[list[tuple[str, RateLimit, int]]]:
    out = yield one(
        "SELECT r.`key`, r.rate, r.per, r.burst, (SELECT COUNT(*) FROM kiln_jobs j"
        " WHERE j.state = 'pending' AND j.rate_key = r.`key`) FROM kiln_rate_limits r"
        " ORDER BY r.`key`"
    )
    return [(r[0], RateLimit(rate=r[1], per=r[2], burst=r[3]), int(r[4])) for r in out[0].rows]
