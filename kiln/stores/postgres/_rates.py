"""PostgreSQL plans for rate limits: declaring a key's limit, the keys with pending
jobs, admission, and the listing.

Admission takes the key's row lock, then reads the database clock; the arithmetic is
kiln.stores._admission's. Owns these statements; the store runs the plans (see _plan).
"""

from __future__ import annotations

from kiln._job import Admission, AdmitResult, RateLimit
from kiln.stores._admission import plan as admission_plan
from kiln.stores.postgres import _jobs
from kiln.stores.postgres._plan import Plan, Stmt, one, step


# rate limits -------------------------------------------------------------------------
def rate_limit_declare(key: str, limit: RateLimit) -> Plan[None]:
    yield step(_jobs.rate_limit_stmt({key: limit}), last=True)


def rate_keys_pending() -> Plan[list[str]]:
    sql = (
        "SELECT DISTINCT rate_key FROM kiln_jobs WHERE state = 'pending' AND run_at <= now()"
        " ORDER BY rate_key"
    )
    rows = (yield one(sql, prepare=True))[0]
    return [str(r[0]) for r in rows]


ADMIT_LOCK = (
    "SELECT rate, per, burst, tokens, extract(epoch FROM updated_at)::float8"
    " FROM kiln_rate_limits WHERE key = %s FOR UPDATE"
)

# A separate statement, so that both its snapshot and clock_timestamp() come after the
# lock above was granted (now() is the transaction's start, before any wait).
ADMIT_READ = (
    "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS at),"
    " l AS (SELECT per FROM kiln_rate_limits WHERE key = %s)"
    " SELECT c.at, extract(epoch FROM c.at)::float8,"
    " (SELECT count(*) FROM kiln_jobs, l WHERE rate_key = %s"
    "  AND admitted_at > c.at - l.per * interval '1 second'),"
    " (SELECT extract(epoch FROM min(admitted_at))::float8 FROM kiln_jobs, l"
    "  WHERE rate_key = %s AND admitted_at > c.at - l.per * interval '1 second'),"
    " (SELECT count(*) FROM (SELECT 1 FROM kiln_jobs WHERE rate_key = %s"
    "  AND state = 'pending' LIMIT %s) AS p),"
    " ARRAY(SELECT id FROM kiln_jobs WHERE rate_key = %s AND state = 'pending'"
    "  AND run_at <= c.at ORDER BY priority, run_at, id LIMIT %s)"
    " FROM c"
)

# The ids through a subquery the planner does not flatten: a plan that sees the array
# estimates its length and looks cheaper than the generic plan, so with table statistics
# PostgreSQL planned this statement anew at every admission (0 generic plans of 3,273 in
# a drain); hidden, the generic plan (by primary key) is kept.
ADMIT_WRITE = (
    "WITH adm AS (UPDATE kiln_jobs SET state = 'available', admitted_at = %s, run_at = %s"
    " WHERE id = ANY((SELECT %s::bigint[] OFFSET 0)::bigint[]) AND state = 'pending'"
    " RETURNING id, queue, kind, state, run_at, created_at)"
    f"{_jobs.notify_from('adm')} SELECT id, queue, kind,"
    " greatest(extract(epoch FROM %s - created_at), 0)::float8 FROM adm"
    f" WHERE {_jobs.NOTIFIED} ORDER BY id"
)

ADMIT_TOKENS = "UPDATE kiln_rate_limits SET tokens = %s, updated_at = %s WHERE key = %s"


def admit(key: str, max_batch: int) -> Plan[AdmitResult]:
    out = yield step(
        Stmt(ADMIT_LOCK, (key,)),
        Stmt(ADMIT_READ, (key, key, key, key, max_batch + 1, key, max_batch)),
    )
    if not out[0]:
        return AdmitResult(admitted=[], next_at=None, declared=False)
    rate, per, burst, tokens, updated_at = out[0][0]
    at, now, in_window, oldest, pending, due = out[1][0]
    limit = RateLimit(rate=rate, per=per, burst=burst)
    decision = admission_plan(limit, tokens, updated_at, now, int(in_window), len(due), oldest)
    chosen = list(due[: decision.admit])
    stmts = [Stmt(ADMIT_TOKENS, (decision.tokens, at, key))]
    if chosen:
        stmts.insert(0, Stmt(ADMIT_WRITE, (at, at, chosen, at)))
    res = yield step(*stmts, last=True)
    rows = res[0] if chosen else []
    admitted = [Admission(job_id=r[0], queue=r[1], kind=r[2], delay=r[3]) for r in rows]
    more = int(pending) > len(admitted)
    return AdmitResult(admitted=admitted, next_at=decision.next_at if more else None)


def rate_limit_list() -> Plan[list[tuple[str, RateLimit, int]]]:
    sql = (
        "SELECT r.key, r.rate, r.per, r.burst, (SELECT count(*) FROM kiln_jobs j"
        " WHERE j.rate_key = r.key AND j.state = 'pending') FROM kiln_rate_limits r"
        " ORDER BY r.key"
    )
    rows = (yield one(sql))[0]
    return [(r[0], RateLimit(rate=r[1], per=r[2], burst=r[3]), int(r[4])) for r in rows]
