"""PostgreSQL plans for global concurrency limits (kiln._concurrency): the limited claim,
the declaration of queue limits, and the running jobs by key group.

The limited claim is one statement, like the plain claim. It locks the rows of the keys
whose jobs wait in the queue (``FOR UPDATE SKIP LOCKED``: a key another server is
claiming is skipped, never waited on), least recently served first, and the row of the
queue's own limit if it has one; it counts each key's running jobs in its snapshot and
takes at most ``max - running`` of them. A count read in the statement's snapshot can
be used after the lock because of one rule, kept by this statement alone: **jobs of a
key (or of a limited queue) become running only in a claim that holds the row's lock
and writes a new version of the row** (``last_claimed_at``), in the same transaction.
Whatever else happens to a job only takes it out of ``running`` (results, rescue,
hand-back, fencing, cancellation, deletion), which lowers the count. So when the row
version this statement locked is the very version its snapshot sees (same ``ctid``), no
claim of that key committed between the snapshot and the lock; none can commit while
the lock is held; and the snapshot's count is the running jobs now, or more. When the
versions differ (a claim of the key committed in between, or its max changed), the key
yields nothing this time; it is taken again at the next claim. (The two-statement claim
of earlier versions also wrote a new version of every row it locked, so a fleet in the
middle of an upgrade keeps the rule.) Nothing is counted in a table of its own: a job
that leaves ``running`` frees its slot by that alone.

The plain claim never takes a key's jobs (``conc_key IS NULL``) nor a job of a queue
with a limit (it checks for the row ``queue:NAME``), so it cannot break the rule; a
plain claim already running when a queue's limit is first declared can still commit
after it (the window the declaration has with any claim, docs/adr/0006).
Owns these statements only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kiln._concurrency import group_of, queue_group
from kiln._job import JobRow
from kiln.stores.postgres._jobs import CLAIM_COLS, JOB_COLS, claimed
from kiln.stores.postgres._plan import Plan, Step, Stmt, one

# Shared by both limited claims: the parameters as one materialized row (prm), the
# queue's row locked (ql) and as the snapshot sees it (qs), and its new version when
# the claim took a job (uq).
_PRM = (
    "WITH prm AS MATERIALIZED (SELECT %(q)s::text AS queue, %(kinds)s::text[] AS kinds,"
    "  %(limit)s::int AS n, %(qkey)s::text AS qkey),"
)
_QUEUE_ROW = (
    " ql AS MATERIALIZED (SELECT max, ctid AS vid FROM kiln_concurrency_keys"
    "  WHERE conc_key = (SELECT qkey FROM prm) FOR UPDATE SKIP LOCKED),"
    " qs AS (SELECT ctid AS vid FROM kiln_concurrency_keys"
    "  WHERE conc_key = (SELECT qkey FROM prm)),"
)
_QUEUE_SERVED = (
    " uq AS (UPDATE kiln_concurrency_keys SET last_claimed_at = now()"
    "  WHERE conc_key = (SELECT qkey FROM prm) AND EXISTS (SELECT 1 FROM upd) RETURNING 1)"
)

# The limited claim (module docstring), as CTEs:
# prm holds the parameters, materialized: read through it, their values do not steer
# the estimates, so PostgreSQL keeps the generic plan of the prepared statement (with
# table statistics and the parameters inline it planned every claim, 1 to 1.5 ms).
# lk locks the keys with an available job in the queue and a free slot by this
# snapshot, least recently served first; the probe for an available job is a scalar
# subquery with LIMIT 1, one index probe per key (as EXISTS, the planner turns it into
# a semi-join that reads the queue's whole backlog), ordered as kiln_jobs_conc_available
# is (unordered, with statistics it became a sequential scan of the table). `running`
# is the snapshot's count (a lateral subquery, not locked: an update of the key row,
# rechecked at the lock, does not recount it), `vid` the ctid of the version locked,
# the latest one.
# k keeps the keys whose locked version is the snapshot's (the rule above).
# The plain jobs of the queue come in too (a limited queue's plain jobs count against
# the queue's limit), walked once per kind along kiln_jobs_claim (queue, kind, priority,
# run_at, id) as the plain claim walks it, so a backlog is neither read nor sorted
# (tests/stores/test_postgres_concurrency_plans.py). Fairness: the first job of every
# key before the second of any, then priority (which keys take part is lk's least
# recently served).
# The queue's own row (ql, locked; qs, the snapshot's version): no row, no queue limit;
# locked by this statement and unchanged since the snapshot, at most max - running of
# the queue's jobs; otherwise (another claim holds it or just committed) nothing.
# A key's jobs are read without row locks: only the holder of the key's lock claims
# them, so only the rows taken are written (a cancel meanwhile: the update finds them
# no longer available).
# Reading about what it takes: of n keys, the first round reads at most cap =
# ceil(limit / n) jobs of each (a), which is all the claim takes when every key has
# that many. Otherwise the claim is short by `short` = limit minus the jobs of the
# first cap rounds (a, and the plain jobs among them); those can only come from later
# rounds of keys that had more, so a second round (b) reads at most `short` more of
# each key, past its first cap. Both rounds read one snapshot; the result is the same
# as reading `limit` jobs of every key.
# Last, the rule: a new version of the row of every key a job was taken of (uk), and of
# the queue's row if a job was taken (uq); they are rows lk and ql locked.
CLAIM_LIMITED = (
    f"{_PRM}"
    " lk AS MATERIALIZED (SELECT c.conc_key, c.max, c.ctid AS vid, n.running"
    "  FROM kiln_concurrency_keys c CROSS JOIN LATERAL (SELECT count(*) AS running"
    "  FROM kiln_jobs r WHERE r.conc_key = c.conc_key AND r.state = 'running') n"
    "  WHERE (SELECT 1 FROM kiln_jobs j WHERE j.conc_key = c.conc_key"
    "  AND j.state = 'available' AND j.queue = (SELECT queue FROM prm)"
    "  AND j.kind = ANY((SELECT kinds FROM prm)::text[])"
    "  ORDER BY j.priority, j.run_at, j.id LIMIT 1) = 1 AND n.running < c.max"
    "  ORDER BY c.last_claimed_at, c.conc_key LIMIT (SELECT n FROM prm)"
    "  FOR UPDATE OF c SKIP LOCKED),"
    " k AS (SELECT lk.conc_key, lk.max - lk.running AS room,"
    "  row_number() OVER (ORDER BY lk.conc_key) AS ord FROM lk WHERE lk.vid ="
    "  (SELECT s.ctid FROM kiln_concurrency_keys s WHERE s.conc_key = lk.conc_key)),"
    " f AS (SELECT k.*, greatest(0, least((SELECT n FROM prm), k.room)) AS free,"
    "  ((SELECT n FROM prm) + n.n - 1) / n.n AS cap"
    "  FROM k CROSS JOIN (SELECT greatest(1, count(*))::int AS n FROM k) n),"
    " a AS (SELECT c.id, c.priority, c.run_at, f.ord,"
    "  row_number() OVER (PARTITION BY f.conc_key ORDER BY c.priority, c.run_at, c.id) AS rn"
    "  FROM f CROSS JOIN LATERAL (SELECT j.id, j.priority, j.run_at FROM kiln_jobs j"
    "  WHERE j.conc_key = f.conc_key AND j.state = 'available'"
    "  AND j.queue = (SELECT queue FROM prm) AND j.kind = ANY((SELECT kinds FROM prm)::text[])"
    "  ORDER BY j.priority, j.run_at, j.id LIMIT least(f.free, f.cap)) c),"
    " pln AS (SELECT j.id, j.priority, j.run_at, 0 AS ord,"
    "  row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS rn FROM (SELECT p.id,"
    "  p.priority, p.run_at FROM (SELECT DISTINCT unnest((SELECT kinds FROM prm)) AS kind)"
    "  AS pk CROSS JOIN LATERAL (SELECT id, priority, run_at FROM kiln_jobs"
    "  WHERE state = 'available' AND queue = (SELECT queue FROM prm) AND conc_key IS NULL"
    "  AND kind = pk.kind ORDER BY priority, run_at, id LIMIT (SELECT n FROM prm)"
    "  FOR UPDATE SKIP LOCKED) p ORDER BY p.priority, p.run_at, p.id"
    "  LIMIT (SELECT n FROM prm)) j),"
    " short AS (SELECT (SELECT n FROM prm) - (SELECT count(*) FROM a) - (SELECT count(*)"
    "  FROM pln WHERE rn <= (SELECT min(cap) FROM f)) AS n),"
    " b AS (SELECT c.id, c.priority, c.run_at, f.ord, f.cap"
    "  + row_number() OVER (PARTITION BY f.conc_key ORDER BY c.priority, c.run_at, c.id) AS rn"
    "  FROM f CROSS JOIN LATERAL (SELECT j.id, j.priority, j.run_at FROM kiln_jobs j"
    "  WHERE j.conc_key = f.conc_key AND j.state = 'available'"
    "  AND j.queue = (SELECT queue FROM prm) AND j.kind = ANY((SELECT kinds FROM prm)::text[])"
    "  ORDER BY j.priority, j.run_at, j.id"
    "  OFFSET f.cap LIMIT least(f.free - f.cap, (SELECT n FROM short))) c"
    "  WHERE f.free > f.cap AND (SELECT n FROM short) > 0),"
    f"{_QUEUE_ROW}"
    " room AS (SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM qs) THEN (SELECT n FROM prm)"
    "  WHEN (SELECT vid FROM ql) = (SELECT vid FROM qs) THEN greatest(0,"
    "  least((SELECT n FROM prm), (SELECT max FROM ql) - (SELECT count(*) FROM kiln_jobs"
    "  WHERE state = 'running' AND queue = (SELECT queue FROM prm)))) ELSE 0 END AS n),"
    " picked AS (SELECT id FROM (SELECT * FROM a UNION ALL SELECT * FROM b"
    "  UNION ALL SELECT * FROM pln) x WHERE NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p"
    "  WHERE p.queue IN ((SELECT queue FROM prm), '*'))"
    "  ORDER BY rn, priority, ord, run_at, id LIMIT (SELECT n FROM room)),"
    " upd AS (UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1,"
    "  attempted_at = now(), server_id = %(server)s WHERE id IN (SELECT id FROM picked)"
    "  AND state = 'available'"
    f"  RETURNING {CLAIM_COLS}, conc_key AS taken_key),"
    " uk AS (UPDATE kiln_concurrency_keys SET last_claimed_at = now()"
    "  WHERE conc_key IN (SELECT taken_key FROM upd) RETURNING 1),"
    f"{_QUEUE_SERVED}"
    f" SELECT {JOB_COLS} FROM upd"
)


# The claim of a pool none of whose kinds has a limit of its own, in a queue that has
# one (Store.job_claim, keys False): the queue's part of CLAIM_LIMITED alone. It locks
# the queue's row (ql) and trusts the snapshot's count of the queue's running jobs only
# when that row is the version the snapshot sees (qs), the rule above; then it walks
# the queue's plain jobs as the plain claim does (kiln_jobs_claim, once per kind,
# skipping locked ones, at most `room` of each), takes the first `room` of them and
# writes a new version of the queue's row if it took any (uq). Jobs with a key are
# left alone, as the plain claim leaves them. No key row is read: with ten keys the
# full statement costs about twice the plain claim, this one about the same
# (docs/performance.md, "Global concurrency limits").
CLAIM_QUEUE_LIMITED = (
    f"{_PRM}"
    f"{_QUEUE_ROW}"
    " room AS MATERIALIZED (SELECT prm.queue, prm.kinds, CASE WHEN NOT EXISTS (SELECT 1 FROM qs)"
    "  THEN prm.n WHEN (SELECT vid FROM ql) = (SELECT vid FROM qs)"
    "  THEN greatest(0, least(prm.n, (SELECT max FROM ql) - (SELECT count(*) FROM kiln_jobs r"
    "  WHERE r.state = 'running' AND r.queue = prm.queue))) ELSE 0 END AS n FROM prm"
    "  WHERE NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p WHERE p.queue IN (prm.queue, '*'))),"
    " upd AS (UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1,"
    "  attempted_at = now(), server_id = %(server)s WHERE id = ANY(ARRAY(SELECT c.id"
    "  FROM room CROSS JOIN LATERAL (SELECT DISTINCT unnest(room.kinds) AS kind) AS k"
    "  CROSS JOIN LATERAL (SELECT id, priority, run_at FROM kiln_jobs"
    "  WHERE state = 'available' AND conc_key IS NULL AND queue = room.queue"
    "  AND kind = k.kind ORDER BY priority, run_at, id LIMIT room.n FOR UPDATE SKIP LOCKED) AS c"
    "  ORDER BY c.priority, c.run_at, c.id LIMIT (SELECT n FROM room)))"
    f"  RETURNING {CLAIM_COLS}),"
    f"{_QUEUE_SERVED}"
    " SELECT * FROM upd"
)


def _positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its %(name)s placeholders as %s, and the names in their order."""
    names = tuple(re.findall(r"%\((\w+)\)s", sql))
    return re.sub(r"%\((\w+)\)s", "%s", sql), names


CLAIM_SQL, CLAIM_NAMES = _positional(CLAIM_LIMITED)
QUEUE_SQL, QUEUE_NAMES = _positional(CLAIM_QUEUE_LIMITED)


def claim(
    queue: str, kinds: list[str], limit: int, server_id: str, keys: bool = True
) -> Plan[list[JobRow]]:
    """The claim of a pool whose queue may hold limited jobs (see module docstring):
    one statement, one round trip, as the plain claim. ``keys`` False: only the
    queue's limit counts (CLAIM_QUEUE_LIMITED)."""
    if not kinds or limit <= 0:
        return []
    params: dict[str, Any] = {
        "qkey": queue_group(queue), "q": queue, "kinds": kinds, "limit": limit,
        "server": server_id,
    }
    sql, names = (CLAIM_SQL, CLAIM_NAMES) if keys else (QUEUE_SQL, QUEUE_NAMES)
    stmt = Stmt(sql, tuple(params[n] for n in names), prepare=True, binary=True)
    return claimed((yield Step((stmt,), last=True))[0])


DECLARE = (
    "INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT k, m"
    " FROM unnest(%s::text[], %s::int[]) AS u(k, m) WHERE NOT EXISTS (SELECT 1 FROM"
    " kiln_concurrency_keys c WHERE c.conc_key = u.k AND c.max = u.m)"
    " ON CONFLICT (conc_key) DO UPDATE SET max = excluded.max"
)


def declare(limits: Mapping[str, int]) -> Plan[None]:
    names = sorted(limits)
    if names:
        yield one(DECLARE, names, [limits[k] for k in names])


IN_USE = (
    "SELECT split_part(conc_key, '|', 1), count(*) FROM kiln_jobs"
    " WHERE state = 'running' AND conc_key IS NOT NULL GROUP BY 1"
    " UNION ALL SELECT c.conc_key, (SELECT count(*) FROM kiln_jobs j WHERE j.state = 'running'"
    " AND j.queue = substr(c.conc_key, 7)) FROM kiln_concurrency_keys c"
    " WHERE c.conc_key LIKE 'queue:%%'"
)


def in_use() -> Plan[dict[str, int]]:
    rows = (yield one(IN_USE))[0]
    out: dict[str, int] = {}
    for group, n in rows:
        key = group_of(str(group))
        out[key] = out.get(key, 0) + int(n)
    return out

