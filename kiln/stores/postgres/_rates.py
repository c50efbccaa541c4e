"""PostgreSQL plans for rate limits: declaring a key's limit, the keys with pending
jobs, admission, and the listing.

Admission takes the key's row lock, then reads the database clock; the arithmetic is
kiln.stores._admission's. A key whose row another transaction holds (another admitter,
or a producer's open transaction declaring the limit) is skipped, never waited on, so
it holds up no other key. Owns these statements; the store runs the plans (see _plan).
"""

from __future__ import annotations

from kiln._model._job import Admission, AdmitResult, RateLimit
from kiln.stores._admission import plan as admission_plan
from kiln.stores.postgres import _insert, _rate_backlog
from kiln.stores.postgres._plan import Plan, Stmt, one, step


# rate limits -------------------------------------------------------------------------
def rate_limit_declare(key: str, limit: RateLimit) -> Plan[None]:
    yield step(_insert.rate_limit_stmt({key: limit}), last=True)


# The keys with pending jobs due now, by a loose index scan of kiln_jobs_pending: one
# index probe per key (the next key after the last one found), then one probe for a
# due job of that key. Work per call grows with the keys that have pending jobs, not
# with the pending jobs (a DISTINCT read the whole backlog: 85 to 143 ms a pass at
# 200,000 jobs; tests/flow/test_admission_cost.py). The probe is a scalar subquery with
# LIMIT 1: as EXISTS, with stale statistics, it became a hash semi-join over the backlog.
KEYS_PENDING = (
    "WITH RECURSIVE k(key) AS ((SELECT rate_key FROM kiln_jobs WHERE state = 'pending'"
    " AND rate_key IS NOT NULL ORDER BY rate_key LIMIT 1) UNION ALL"
    " SELECT (SELECT j.rate_key FROM kiln_jobs j WHERE j.state = 'pending'"
    " AND j.rate_key > k.key ORDER BY j.rate_key LIMIT 1) FROM k WHERE k.key IS NOT NULL)"
    " SELECT k.key FROM k WHERE k.key IS NOT NULL AND (SELECT 1 FROM kiln_jobs j"
    " WHERE j.state = 'pending' AND j.rate_key = k.key AND j.run_at <= now() LIMIT 1) = 1"
)


def rate_keys_pending() -> Plan[list[str]]:
    rows = (yield one(KEYS_PENDING, prepare=True))[0]
    return [str(r[0]) for r in rows]


# Every key of a call in four statements, whatever the number of keys: their row locks,
# then their reads, then every job's admission and every key's bucket.
ADMIT_LOCK = (
    "SELECT key, rate, per, burst, tokens, extract(epoch FROM updated_at)::float8"
    " FROM kiln_rate_limits WHERE key = ANY(%s::text[]) ORDER BY key FOR UPDATE SKIP LOCKED"
)

# A separate statement, so that both its snapshot and clock_timestamp() come after the
# locks above were granted (now() is the transaction's start, before any wait). It reads
# only the pending jobs each key could admit this time (``most``: what the bucket holds,
# what it refills over the admission ahead, and one), not admit_batch of them: a pass
# over 40 keys of 500 pending jobs each read 20,000 index entries to admit 200. The
# window is counted only within `per` of a change of the limit (migration 16):
# otherwise the bucket alone bounds it, and counting cost up to rate + burst entries.
_IN_WINDOW = (
    "l.changed_at > c.at - l.per * interval '1 second'"
)
ADMIT_READ = (
    "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS at)"
    " SELECT k.key, c.at, extract(epoch FROM c.at)::float8,"
    f" CASE WHEN {_IN_WINDOW} THEN (SELECT count(*) FROM kiln_jobs j WHERE j.rate_key = k.key"
    "  AND j.admitted_at > c.at - l.per * interval '1 second') ELSE 0 END,"
    f" CASE WHEN {_IN_WINDOW} THEN (SELECT extract(epoch FROM min(j.admitted_at))::float8"
    "  FROM kiln_jobs j WHERE j.rate_key = k.key"
    "  AND j.admitted_at > c.at - l.per * interval '1 second') END,"
    " (SELECT count(*) FROM (SELECT 1 FROM kiln_jobs j WHERE j.rate_key = k.key"
    "  AND j.state = 'pending' LIMIT coalesce(l.most, 0) + 1) AS p),"
    " ARRAY(SELECT j.id FROM kiln_jobs j WHERE j.rate_key = k.key AND j.state = 'pending'"
    "  AND j.run_at <= c.at AND coalesce(j.queue = ANY(%s::text[]), true)"
    "  ORDER BY j.priority, j.run_at, j.id LIMIT coalesce(l.most, 0)),"
    " l.per IS NOT NULL"
    " FROM c CROSS JOIN unnest(%s::text[]) AS k(key)"
    " LEFT JOIN LATERAL (SELECT per, changed_at, least(%s::int, greatest(burst, 1)"
    "  + ceil(rate * %s::float8 / per)::int + 1) AS most FROM kiln_rate_limits r"
    "  WHERE r.key = k.key) AS l ON true"
)

# The ids and offsets through subqueries the planner does not flatten: a plan that
# sees the array estimates its length and looks cheaper than the generic plan, so with
# table statistics PostgreSQL planned this statement anew at every admission (0 generic
# plans of 3,273 in a drain); hidden, the generic plan (by primary key) is kept. The
# state test is not indexable on purpose: with statistics that had not seen the
# backlog, the planner took kiln_jobs_state_queue (state, queue, id) and walked every
# pending job of the table. A job admitted ahead (offset above 0, microseconds after
# the admission's clock reading) is scheduled at its time (kiln.stores._admission).
ADMIT_WRITE = (
    "WITH adm AS (UPDATE kiln_jobs SET state = CASE WHEN v.off > 0 THEN 'scheduled'"
    " ELSE 'available' END,"
    " admitted_at = %s::timestamptz + v.off * interval '1 microsecond',"
    " run_at = %s::timestamptz + v.off * interval '1 microsecond'"
    " FROM (SELECT * FROM unnest((SELECT %s::bigint[] OFFSET 0)::bigint[],"
    " (SELECT %s::bigint[] OFFSET 0)::bigint[]) OFFSET 0) AS v(id, off)"
    " WHERE kiln_jobs.id = v.id AND kiln_jobs.state || '' = 'pending'"
    " RETURNING kiln_jobs.id, queue, kind, state, run_at, created_at, admitted_at, rate_key)"
    f"{_insert.notify_from('adm')} SELECT id, queue, kind,"
    " greatest(extract(epoch FROM admitted_at - created_at), 0)::float8, rate_key FROM adm"
    f" WHERE {_insert.NOTIFIED} ORDER BY id"
)

ADMIT_TOKENS = (
    "UPDATE kiln_rate_limits r SET tokens = v.tokens,"
    " updated_at = %s::timestamptz + v.upd * interval '1 microsecond'"
    " FROM unnest(%s::text[], %s::float8[], %s::bigint[]) AS v(key, tokens, upd)"
    " WHERE r.key = v.key"
)


def admit(
    key: str, max_batch: int, queues: list[str] | None = None, ahead: float = 0.0
) -> Plan[AdmitResult]:
    """``queues``: admit only jobs of these (None: of any queue); ``ahead``: seconds
    to admit ahead (kiln.stores._admission)."""
    return (yield from admit_keys([key], max_batch, queues, ahead))[key]


def admit_keys(
    keys: list[str], max_batch: int, queues: list[str] | None = None, ahead: float = 0.0
) -> Plan[dict[str, AdmitResult]]:
    """Admit several keys in one transaction of two round trips and four statements:
    every key's lock and read in the first, every job's and key's write (and the
    commit) in the second."""
    out = yield step(Stmt(ADMIT_LOCK, (keys,), prepare=True),
                     Stmt(ADMIT_READ, (queues, keys, max_batch, ahead), prepare=True))
    locked = {str(r[0]): r[1:] for r in out[0]}
    results: dict[str, AdmitResult] = {}
    ids: list[int] = []
    offsets: list[int] = []
    bucket_keys: list[str] = []
    bucket_tokens: list[float] = []
    bucket_at: list[int] = []
    pendings: dict[str, int] = {}
    at = out[1][0][1] if out[1] else None  # one clock reading, after every lock
    for key, _at, now, in_window, oldest, pending, due, known in out[1]:
        if key not in locked:  # no row, or locked by another transaction: not waited on
            results[key] = AdmitResult(admitted=[], next_at=None, declared=bool(known),
                                       busy=bool(known))
            continue
        rate, per, burst, tokens, updated_at = locked[key]
        decision = admission_plan(RateLimit(rate=rate, per=per, burst=burst), tokens,
                                  updated_at, now, int(in_window), len(due), oldest, ahead)
        ids += due[: decision.admit]
        offsets += decision.offsets
        bucket_keys.append(key)
        bucket_tokens.append(decision.tokens)
        bucket_at.append(decision.updated)
        more = int(pending) > decision.admit
        results[key] = AdmitResult(admitted=[], next_at=decision.next_at if more else None)
        pendings[key] = int(pending)
    if not bucket_keys:
        return results
    writes = [Stmt(ADMIT_TOKENS, (at, bucket_keys, bucket_tokens, bucket_at), prepare=True)]
    if ids:
        writes.insert(0, Stmt(ADMIT_WRITE, (at, at, ids, offsets), prepare=True))
    res = yield step(*writes, last=True)
    admitted: dict[str, list[Admission]] = {}
    for r in res[0] if ids else []:
        admitted.setdefault(r[4], []).append(
            Admission(job_id=r[0], queue=r[1], kind=r[2], delay=r[3]))
    for key, jobs in admitted.items():
        more = pendings[key] > len(jobs)
        results[key] = AdmitResult(admitted=jobs, next_at=results[key].next_at if more else None)
    return results


def rate_limit_list() -> Plan[list[tuple[str, RateLimit, int]]]:
    sql = (
        "SELECT r.key, r.rate, r.per, r.burst, (SELECT count(*) FROM kiln_jobs j"
        " WHERE j.rate_key = r.key AND j.state = 'pending') FROM kiln_rate_limits r"
        " ORDER BY r.key"
    )
    rows = (yield one(sql))[0]
    return [(r[0], RateLimit(rate=r[1], per=r[2], burst=r[3]), int(r[4])) for r in rows]


# The keys with the most pending jobs that are due (kilnotel's per-key gauges), exact
# or capped: kiln.stores.postgres._rate_backlog
rate_keys_backlog = _rate_backlog.rate_keys_backlog


# Pruning key rows no job needs (Store.rate_keys_prune): the candidates (unused by this
# snapshot: a used key among them would end a pass early, its batch short, and stay the
# first candidate of every pass) are locked first, skipping any another transaction
# holds (an enqueue declaring the key locks its row until it commits), then deleted by a
# second statement, whose snapshot, taken after the locks, sees every job committed
# before them. A row is a candidate once its key has been idle for ``idle_for`` plus a
# window and a full refill, so its bucket was full and no admission is in its window: a
# key declared again starts where it was.
PRUNE_LOCK = (
    "SELECT key FROM kiln_rate_limits WHERE updated_at < now() - (%s + per"
    " + per * greatest(burst, 1)::float8 / rate) * interval '1 second'"
    " AND NOT key = ANY(%s::text[]) AND NOT EXISTS (SELECT 1 FROM kiln_jobs j"
    " WHERE j.rate_key = kiln_rate_limits.key AND j.state = 'pending') AND NOT EXISTS"
    " (SELECT 1 FROM kiln_jobs j WHERE j.rate_key = kiln_rate_limits.key"
    " AND j.rate_key IS NOT NULL AND j.state IN ('awaiting', 'scheduled', 'available',"
    " 'running')) ORDER BY updated_at LIMIT %s FOR UPDATE SKIP LOCKED"
)
PRUNE = (
    "WITH d AS (DELETE FROM kiln_rate_limits r WHERE key = ANY(%s::text[]) AND NOT EXISTS"
    " (SELECT 1 FROM kiln_jobs j WHERE j.rate_key = r.key AND j.state = 'pending')"
    " AND NOT EXISTS (SELECT 1 FROM kiln_jobs j WHERE j.rate_key = r.key"
    " AND j.rate_key IS NOT NULL"
    " AND j.state IN ('awaiting', 'scheduled', 'available', 'running'))"
    " RETURNING 1) SELECT count(*) FROM d"
)


def rate_keys_prune(idle_for: float, keep: list[str], limit: int) -> Plan[int]:
    locked = (yield step(Stmt(PRUNE_LOCK, (idle_for, keep, limit))))[0]
    keys = [str(r[0]) for r in locked]
    if not keys:
        return 0
    rows = (yield step(Stmt(PRUNE, (keys,)), last=True))[0]
    return int(rows[0][0])
