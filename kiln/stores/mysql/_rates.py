"""MySQL/MariaDB plans for rate limits: declaring a key's limit, the keys with pending
jobs, admission, and the listing.

Admission takes the key's row lock, then reads the database clock; the arithmetic is
kiln.stores._admission's. A key whose row another transaction holds (another admitter,
or a producer's open transaction declaring the limit) is skipped, never waited on, and
so are pending jobs another transaction holds: one key holds up no other. Owns these
statements; the store runs the plans (see _plan).
"""

from __future__ import annotations

from datetime import datetime

from kiln._model._job import Admission, AdmitResult, RateLimit
from kiln.stores._admission import MICRO, Decision, most
from kiln.stores._admission import plan as admission_plan
from kiln.stores._rows import epoch
from kiln.stores.mysql import _counts
from kiln.stores.mysql._columns import NOW, rate_limit_stmt
from kiln.stores.mysql._plan import Plan, Stmt, marks, one, step


# rate limits -------------------------------------------------------------------------
def rate_limit_declare(key: str, limit: RateLimit) -> Plan[None]:
    yield step(rate_limit_stmt({key: limit}), last=True)


# The keys with pending jobs due now, by a loose index scan done by hand: MariaDB
# neither skips along kiln_jobs_pending for DISTINCT nor seeks it in a recursive CTE
# (it walks the index from its start for each key), so each step asks for the key
# after the last one found (one index seek) and whether it has a job due (one more).
# KEYS_PER_TRIP such steps go in one round trip, chained through a session variable
# passed to prepared statements (EXECUTE ... USING: a bound value, which the optimizer
# seeks the index with; the variable in the statement's text made it scan the index):
# 40 keys cost two round trips, not 41 (the first trip takes FIRST_TRIP keys, so that a
# pass over one key sends about the statements it did before). Work per call grows with
# the keys that have pending jobs, not with the pending jobs
# (tests/flow/test_admission_cost.py).
# (MIN: the optimizer reads it off the index; ORDER BY ... LIMIT 1 was a filesort)
KEYS_PER_TRIP = 50
FIRST_TRIP = 4
KEY_PREPARE = (
    "PREPARE kiln_key_after FROM 'SELECT MIN(rate_key) INTO @kiln_rate_key FROM kiln_jobs"
    " WHERE state = ''pending'' AND rate_key > ?'"
)
DUE_PREPARE = (
    "PREPARE kiln_key_due FROM 'SELECT ?, EXISTS (SELECT 1 FROM kiln_jobs"
    f" WHERE state = ''pending'' AND rate_key = ? AND run_at <= {NOW})'"
)
KEY_AFTER = "EXECUTE kiln_key_after USING @kiln_rate_key"
KEY_DUE = "EXECUTE kiln_key_due USING @kiln_rate_key, @kiln_rate_key"


def rate_keys_pending() -> Plan[list[str]]:
    keys: list[str] = []
    last = ""
    trip = FIRST_TRIP
    while True:
        stmts = [Stmt(KEY_PREPARE), Stmt(DUE_PREPARE), Stmt("SET @kiln_rate_key = %s", (last,))]
        for _ in range(trip):
            stmts += [Stmt(KEY_AFTER), Stmt(KEY_DUE)]
        trip = KEYS_PER_TRIP
        out = yield step(*stmts)
        for result in out[4::2]:
            key, due = result.rows[0]
            if key is None:
                return keys
            last = str(key)
            if due:
                keys.append(last)


def admit(
    key: str, max_batch: int, queues: list[str] | None = None, ahead: float = 0.0
) -> Plan[AdmitResult]:
    """One key: see admit_keys."""
    return (yield from admit_keys([key], max_batch, queues, ahead))[key]


# Every key's row in one statement; ``recent``: its limit changed within a window of
# this statement's start, so its window may hold admissions made under the old limit
# and is counted (kiln.stores._admission). The clock only moves on, so a key not recent
# here is not recent at the clock reading after the locks either.
LOCK = ("SELECT `key`, rate, per, burst, tokens, updated_at, changed_at > {now}"
        " - INTERVAL ROUND(per * 1000000) MICROSECOND FROM kiln_rate_limits"
        " WHERE `key` IN ({keys}) ORDER BY `key` FOR UPDATE SKIP LOCKED")
NOW_SQL = "CAST(@kiln_now AS DATETIME(6))"


def _window(key: str) -> list[Stmt]:
    """A recently changed key's window: how many admissions, and the oldest."""
    return [
        # @kiln_window: counted only within `per` of a change of the limit (migration
        # 16). A variable, so that the count below is optimized away when it is false
        # (in the join's condition, MariaDB read the window anyway). SELECT ... INTO,
        # not SET @v = (SELECT ...): MariaDB reads a SET's subquery with a shared lock
        # (at READ COMMITTED too), which would wait on a key's row that another
        # transaction holds, the very wait SKIP LOCKED above avoids
        Stmt(f"SELECT COALESCE((SELECT changed_at > {NOW_SQL}"
             " - INTERVAL ROUND(per * 1000000) MICROSECOND FROM kiln_rate_limits"
             " WHERE `key` = %s), 0) INTO @kiln_window", (key,)),
        Stmt(
            "SELECT COUNT(j.id), MIN(j.admitted_at) FROM kiln_rate_limits r"
            " LEFT JOIN kiln_jobs j ON @kiln_window = 1 AND j.rate_key = r.`key`"
            f" AND j.admitted_at > {NOW_SQL} - INTERVAL ROUND(r.per * 1000000) MICROSECOND"
            " WHERE r.`key` = %s",
            (key,),
        ),
    ]


def _reads(key: str, most: int, queues: list[str] | None) -> list[Stmt]:
    """A locked key's pending jobs (``most`` of them) and whether it has later ones."""
    # queues: admit only jobs of these (None: of any queue); [] admits nothing
    in_queues = "" if queues is None else \
        f" AND queue IN ({marks(len(queues))})" if queues else " AND FALSE"
    return [
        Stmt(
            # in admission order along kiln_jobs_pending_order: along kiln_jobs_pending
            # (its range on run_at looks cheaper) MariaDB sorted the key's whole backlog
            "SELECT id, queue, kind, created_at FROM kiln_jobs"
            " FORCE INDEX (kiln_jobs_pending_order) WHERE state = 'pending'"
            f" AND rate_key = %s AND run_at <= {NOW_SQL}{in_queues}"
            " ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED",
            (key, *(queues or ()), most),
        ),
        Stmt(
            "SELECT EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'pending' AND rate_key = %s"
            f" AND run_at > {NOW_SQL})",
            (key,),
        ),
    ]


def _writes(key: str, now: datetime, ids: list[int], decision: Decision) -> list[Stmt]:
    stmts = [Stmt(
        "UPDATE kiln_rate_limits SET tokens = %s,"
        " updated_at = %s + INTERVAL %s MICROSECOND WHERE `key` = %s",
        (decision.tokens, now, decision.updated, key),
    )]
    if ids:
        # each job its own offset (microseconds after the clock reading): one admitted
        # ahead is scheduled at its time (kiln.stores._admission)
        offset = f"ELT(FIELD(id, {marks(len(ids))}), {marks(len(ids))})"
        pairs = (*ids, *decision.offsets)
        stmts.insert(0, Stmt(
            f"UPDATE kiln_jobs SET state = IF({offset} > 0, 'scheduled', 'available'),"
            f" admitted_at = %s + INTERVAL {offset} MICROSECOND,"
            f" run_at = %s + INTERVAL {offset} MICROSECOND WHERE id IN ({marks(len(ids))})",
            (*pairs, now, *pairs, now, *pairs, *ids),
        ))
    return stmts


def admit_keys(
    keys: list[str], max_batch: int, queues: list[str] | None = None, ahead: float = 0.0
) -> Plan[dict[str, AdmitResult]]:
    """Admit what each key's bucket and window allow, under the key's row lock, for
    several keys in one transaction of two round trips.

    The clock is read after the lock: ``SET @kiln_now`` is a statement of its own that
    runs once the locking SELECT before it has returned (which never waits: a key whose
    row another transaction holds is skipped, AdmitResult.busy). (UTC_TIMESTAMP/NOW are
    fixed at the start of the statement that calls them, so reading the clock inside
    the locking statement itself would give the time of its start; SYSDATE(6) would not,
    but it is not UTC and escapes the one-time-per-statement guarantee.) One
    statement locks every key; the later statements use @kiln_now, read after it.
    """
    locks = yield step(Stmt(LOCK.format(now=NOW, keys=marks(len(keys))), tuple(keys)),
                       begin=True)
    locked = {str(r[0]): r[1:] for r in locks[0].rows}
    results: dict[str, AdmitResult] = {}
    reads: list[Stmt] = [Stmt(f"SET @kiln_now = {NOW}"), Stmt(f"SELECT {NOW_SQL}")]
    for key in keys:
        if key in locked:
            rate, per, burst, _tokens, _updated, recent = locked[key]
            if recent:
                reads += _window(key)
            reads += _reads(key, min(max_batch, most(RateLimit(rate, per, burst), ahead)),
                            queues)
        else:  # no row, or locked by another transaction: not waited on
            reads.append(Stmt("SELECT EXISTS (SELECT 1 FROM kiln_rate_limits"
                              " WHERE `key` = %s)", (key,)))
    out = yield step(*reads)
    now: datetime = out[1].rows[0][0]
    writes: list[Stmt] = []
    at = 2
    for key in keys:
        if key not in locked:
            known = bool(out[at].rows[0][0])
            results[key] = AdmitResult(admitted=[], next_at=None, declared=known, busy=known)
            at += 1
            continue
        rate, per, burst, tokens, updated_at, recent = locked[key]
        in_window, oldest = 0, None
        if recent:
            in_window, oldest = int(out[at + 1].rows[0][0]), out[at + 1].rows[0][1]
            at += 2
        pending, later = out[at].rows, bool(out[at + 1].rows[0][0])
        at += 2
        decision = admission_plan(
            RateLimit(rate=rate, per=per, burst=burst), tokens, epoch(updated_at),
            epoch(now), in_window, len(pending), None if oldest is None else epoch(oldest),
            ahead,
        )
        chosen = pending[: decision.admit]
        writes.extend(_writes(key, now, [int(r[0]) for r in chosen], decision))
        admitted = [
            Admission(job_id=int(r[0]), queue=r[1], kind=r[2],
                      delay=max(epoch(now) + off / MICRO - epoch(r[3]), 0.0))
            for r, off in zip(chosen, decision.offsets, strict=True)
        ]
        more = len(pending) > len(chosen) or later
        results[key] = AdmitResult(admitted=admitted, next_at=decision.next_at if more else None)
    if writes:
        yield step(*writes, last=True)
    else:
        yield step(Stmt("DO 0"), last=True)
    return results


def rate_limit_list() -> Plan[list[tuple[str, RateLimit, int]]]:
    out = yield one(
        "SELECT r.`key`, r.rate, r.per, r.burst, (SELECT COUNT(*) FROM kiln_jobs j"
        " WHERE j.state = 'pending' AND j.rate_key = r.`key`) FROM kiln_rate_limits r"
        " ORDER BY r.`key`"
    )
    return [(r[0], RateLimit(rate=r[1], per=r[2], burst=r[3]), int(r[4])) for r in out[0].rows]


# The keys with the most pending jobs that are due, with their limits (see PostgreSQL's).
BACKLOG = (
    "SELECT j.rate_key, COUNT(*), r.rate, r.per, r.burst FROM kiln_jobs j"
    " LEFT JOIN kiln_rate_limits r ON r.`key` = j.rate_key WHERE j.state = 'pending'"
    f" AND j.rate_key IS NOT NULL AND j.run_at <= {NOW}"
    " GROUP BY j.rate_key, r.rate, r.per, r.burst ORDER BY COUNT(*) DESC, j.rate_key LIMIT %s"
)


def rate_keys_backlog(
    limit: int, cap: int | None = None
) -> Plan[list[tuple[str, RateLimit | None, int]]]:
    if cap is not None:  # each key exact up to cap, estimated above (_counts)
        return (yield from _counts.rate_keys_backlog(limit, cap))
    out = yield one(BACKLOG, limit)
    return [(r[0], None if r[2] is None else RateLimit(rate=r[2], per=r[3], burst=r[4]),
             int(r[1])) for r in out[0].rows]


def rate_keys_prune(idle_for: float, keep: list[str], limit: int) -> Plan[int]:
    """Delete the rows of keys idle for ``idle_for`` plus a window and a full refill
    that no unfinished job uses, not in ``keep``: locked first (skipping rows an open
    enqueue holds), then deleted by a statement that reads after the locks (see the
    PostgreSQL plan)."""
    not_kept = f" AND `key` NOT IN ({marks(len(keep))})" if keep else ""
    out = yield step(Stmt(
        "SELECT `key` FROM kiln_rate_limits WHERE updated_at < "
        f"{NOW} - INTERVAL ROUND((%s + per + per * GREATEST(burst, 1) / rate) * 1000000)"
        f" MICROSECOND{not_kept} AND NOT EXISTS (SELECT 1 FROM kiln_jobs j"
        " WHERE j.rate_key = kiln_rate_limits.`key` AND j.state IN ('awaiting', 'pending',"
        " 'scheduled', 'available', 'running'))"  # a used key would end the pass early
        " ORDER BY updated_at LIMIT %s FOR UPDATE SKIP LOCKED",
        (idle_for, *keep, limit),
    ), begin=True)
    keys = [str(r[0]) for r in out[0].rows]
    if not keys:
        yield step(Stmt("DO 0"), last=True)
        return 0
    done = yield step(Stmt(
        f"DELETE FROM kiln_rate_limits WHERE `key` IN ({marks(len(keys))}) AND NOT EXISTS"
        " (SELECT 1 FROM kiln_jobs j WHERE j.rate_key = kiln_rate_limits.`key`"
        " AND j.state IN ('awaiting', 'pending', 'scheduled', 'available', 'running'))",
        tuple(keys),
    ), last=True)
    return done[0].rowcount
