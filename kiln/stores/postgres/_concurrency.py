"""PostgreSQL plans for global concurrency limits (kiln._model._concurrency): the limited claim,
the declaration of queue limits (and their sweep and removal), and the running jobs by
key group.

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

from kiln._model._concurrency import group_of, queue_group
from kiln._model._job import JobRow
from kiln.stores._rows import RAN_UNIQUE, dumps
from kiln.stores.postgres._jobs import CLAIM_COLS, JOB_COLS, claimed
from kiln.stores.postgres._plan import Plan, Step, Stmt, one, step

# A job cancelled while running whose handler has not ended yet (attempt_running: its
# server clears it with the attempt's result, the rescuer when that server is dead) holds
# its slot as a running job does: a cancel must not let a second handler start beside
# the one still running (kiln_jobs_ending; migration 15).
ENDING = "state = 'cancelled' AND attempt_running"

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
# cand: the keys with an available job in the queue; the probe for one is a scalar
# subquery with LIMIT 1, one index probe per key (as EXISTS, the planner turns it into a
# semi-join that reads the queue's whole backlog), ordered as kiln_jobs_conc_available
# is (unordered, with statistics it became a sequential scan of the table).
# cnt: their running jobs (and cancelled ones still ending), in the snapshot, counted
# for all of them at once. Counted key by key (a subquery per key row), the count took
# whichever index the statistics favoured: with statistics taken before jobs ran,
# kiln_jobs_state_queue, so each key's count walked every running entry of the table,
# dead ones included, and a claim over ten keys walked them twenty times; the claim
# slowed down as jobs went through (0.1 to 0.2 of the plain claim after 10,000 jobs;
# bench/RESULTS.md, "Global concurrency limits", 2026-12-07). Grouped, either index is
# walked once at most.
# lk locks those keys that have a free slot by this snapshot, least recently served
# first (FOR NO KEY UPDATE: it excludes the other claims of the key, not the KEY SHARE
# an enqueue of the key holds, see PRUNE_LOCK); `running` is the snapshot's count (not
# locked: an update of the key row, rechecked at the lock, does not recount it), `vid`
# the ctid of the version locked, the latest one.
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
    " cand AS MATERIALIZED (SELECT c.conc_key FROM kiln_concurrency_keys c"
    "  WHERE (SELECT 1 FROM kiln_jobs j WHERE j.conc_key = c.conc_key"
    "  AND j.state = 'available' AND j.queue = (SELECT queue FROM prm)"
    "  AND j.kind = ANY((SELECT kinds FROM prm)::text[])"
    "  ORDER BY j.priority, j.run_at, j.id LIMIT 1) = 1),"
    " cnt AS MATERIALIZED (SELECT x.conc_key, sum(x.n)::int AS running FROM ("
    "  SELECT r.conc_key, count(*) AS n FROM kiln_jobs r WHERE r.state = 'running'"
    "  AND r.conc_key = ANY(ARRAY(SELECT conc_key FROM cand)) GROUP BY r.conc_key"
    "  UNION ALL SELECT r.conc_key, count(*) FROM kiln_jobs r WHERE r.state = 'cancelled'"
    "  AND r.attempt_running AND r.conc_key = ANY(ARRAY(SELECT conc_key FROM cand))"
    "  GROUP BY r.conc_key) x GROUP BY x.conc_key),"
    " lk AS MATERIALIZED (SELECT c.conc_key, c.max, c.ctid AS vid,"
    "  coalesce(cnt.running, 0) AS running"
    "  FROM kiln_concurrency_keys c LEFT JOIN cnt ON cnt.conc_key = c.conc_key"
    "  WHERE c.conc_key IN (SELECT conc_key FROM cand) AND coalesce(cnt.running, 0) < c.max"
    "  ORDER BY c.last_claimed_at, c.conc_key LIMIT (SELECT n FROM prm)"
    "  FOR NO KEY UPDATE OF c SKIP LOCKED),"
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
    "  WHERE state = 'running' AND queue = (SELECT queue FROM prm)) - (SELECT count(*)"
    f"  FROM kiln_jobs WHERE {ENDING} AND queue = (SELECT queue FROM prm)))) ELSE 0 END AS n),"
    " picked AS (SELECT id FROM (SELECT * FROM a UNION ALL SELECT * FROM b"
    "  UNION ALL SELECT * FROM pln) x WHERE NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p"
    "  WHERE p.queue IN ((SELECT queue FROM prm), '*'))"
    "  ORDER BY rn, priority, ord, run_at, id LIMIT (SELECT n FROM room)),"
    " upd AS (UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1,"
    f" {RAN_UNIQUE},"
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
# (bench/RESULTS.md, "Global concurrency limits").
CLAIM_QUEUE_LIMITED = (
    f"{_PRM}"
    f"{_QUEUE_ROW}"
    " room AS MATERIALIZED (SELECT prm.queue, prm.kinds, CASE WHEN NOT EXISTS (SELECT 1 FROM qs)"
    "  THEN prm.n WHEN (SELECT vid FROM ql) = (SELECT vid FROM qs)"
    "  THEN greatest(0, least(prm.n, (SELECT max FROM ql) - (SELECT count(*) FROM kiln_jobs r"
    "  WHERE r.state = 'running' AND r.queue = prm.queue) - (SELECT count(*) FROM kiln_jobs r"
    f"  WHERE {ENDING} AND r.queue = prm.queue))) ELSE 0 END AS n FROM prm"
    "  WHERE NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p WHERE p.queue IN (prm.queue, '*'))),"
    " upd AS (UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1,"
    f" {RAN_UNIQUE},"
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
# A server's own declaration of its keys: the key rows written whatever their max, so
# that each is locked until the commit (see SWEEP), and the server's declaration rows
# (the row of an older kiln's declaration, '', gives way).
DECLARE_SERVER = (
    "INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT k, m"
    " FROM unnest(%s::text[], %s::int[]) AS u(k, m)"
    " ON CONFLICT (conc_key) DO UPDATE SET max = excluded.max"
)
DECLARED = (
    "WITH old AS (DELETE FROM kiln_concurrency_declarations"
    " WHERE conc_key = ANY(%s::text[]) AND server_id = '')"
    " INSERT INTO kiln_concurrency_declarations (conc_key, server_id, max)"
    " SELECT k, %s, m FROM unnest(%s::text[], %s::int[]) AS u(k, m)"
    " ON CONFLICT (conc_key, server_id) DO UPDATE SET max = excluded.max, declared_at = now()"
)


def declare(limits: Mapping[str, int], server_id: str | None = None) -> Plan[None]:
    """Set the max of these keys; with ``server_id``, also record that this server
    declares them (queue limits, which follow their live declarations: ``sweep``)."""
    names = sorted(limits)
    if not names:
        return
    maxes = [limits[k] for k in names]
    if server_id is None:
        yield one(DECLARE, names, maxes)
        return
    yield step(Stmt(DECLARE_SERVER, (names, maxes)),
               Stmt(DECLARED, (names, server_id, names, maxes)), last=True)


# A declaration is live while its server's heartbeat is (or it is an older kiln's, '').
_LIVE = (
    "(d.server_id = '' OR EXISTS (SELECT 1 FROM kiln_servers s WHERE s.id = d.server_id"
    " AND s.heartbeat_at >= now() - %s * interval '1 second'))"
)
# The sweep locks the queue rows first (in key order, as declare does), so a server
# declaring one of them concurrently either committed before (SWEEP's own snapshot,
# taken after the lock, sees its declaration) or waits and writes the row again after.
SWEEP_LOCK = (
    "SELECT 1 FROM kiln_concurrency_keys WHERE conc_key LIKE 'queue:%' ORDER BY conc_key"
    " FOR UPDATE"
)
# The newest live declaration of every queue limit, then: the rows no live server
# declares go (queue limits only: a kind's key rows are written by enqueue), the others
# take the newest declaration's max if it changed (a new row version only then), and the
# declarations of servers gone are forgotten.
SWEEP = (
    "WITH live AS (SELECT DISTINCT ON (d.conc_key) d.conc_key, d.max"
    f" FROM kiln_concurrency_declarations d WHERE {_LIVE}"
    " ORDER BY d.conc_key, d.declared_at DESC, d.server_id DESC),"
    " gone AS (DELETE FROM kiln_concurrency_keys c WHERE c.conc_key LIKE 'queue:%%'"
    " AND NOT EXISTS (SELECT 1 FROM live WHERE live.conc_key = c.conc_key)"
    " RETURNING c.conc_key),"
    " moved AS (UPDATE kiln_concurrency_keys c SET max = live.max FROM live"
    " WHERE c.conc_key = live.conc_key AND c.max <> live.max RETURNING 1),"
    f" forgot AS (DELETE FROM kiln_concurrency_declarations d WHERE NOT {_LIVE} RETURNING 1)"
    " SELECT conc_key FROM gone ORDER BY conc_key"
)


def sweep(dead_after: float) -> Plan[list[str]]:
    yield step(Stmt(SWEEP_LOCK))
    rows = (yield step(Stmt(SWEEP, (dead_after, dead_after)), last=True))[0]
    return [str(r[0]) for r in rows]


REMOVE = (
    "WITH dropped AS (DELETE FROM kiln_concurrency_keys WHERE conc_key = %s RETURNING max),"
    " decl AS (DELETE FROM kiln_concurrency_declarations WHERE conc_key = %s"
    " RETURNING server_id)"
    " SELECT (SELECT max FROM dropped), (SELECT coalesce(array_agg(server_id"
    " ORDER BY server_id), '{}') FROM decl)"
)


def remove(key: str, actor: str) -> Plan[tuple[int | None, list[str]]]:
    """Remove a limit and its declarations, with its audit row, in one transaction:
    the max it had (None: there was none) and the servers that had declared it."""
    rows = (yield step(Stmt(REMOVE, (key, key))))[0]
    found, servers = rows[0][0], list(rows[0][1])
    detail = {"key": key, "max": found, "declared_by": servers}
    yield step(Stmt(AUDIT, (actor, "concurrency_remove", int(found is not None),
                            dumps(detail))), last=True)
    return (None if found is None else int(found)), [str(s) for s in servers]


AUDIT = "INSERT INTO kiln_audit (actor, action, count, detail) VALUES (%s, %s, %s, %s::jsonb)"


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



# Pruning key rows no job uses (Store.concurrency_keys_prune, the leader's pruner): a
# limited claim probes every key row, so per-tenant keys that came and went must not
# stay. A key row is needed while any job of the key is waiting (awaiting, pending,
# scheduled, available), running, or cancelled but still ending (UNUSED). The race is
# with an enqueue (or a requeue, an adoption) that puts a job under a key whose row the
# pruner is deleting: that job would never be claimed. It is closed by a lock on the
# row, taken on both sides:
# - whoever puts a job under a key holds the key's row FOR KEY SHARE (or has just
#   inserted it, or updated its max) until it commits (CONCURRENCY_KEYS_DECLARE);
# - the pruner locks its candidates FOR UPDATE SKIP LOCKED (a row an enqueue holds is
#   skipped: not a candidate this time), then deletes those still unused by a second
#   statement, whose snapshot is taken after the locks: an enqueue that held the row
#   committed before the lock was granted, so its job is seen and the row stays.
# An enqueue that comes after the lock waits for the pruner's commit; if the row was
# deleted, its lock finds nothing and its insert writes the row again (same statement).
# FOR KEY SHARE conflicts only with FOR UPDATE (a delete), not with the claims' FOR NO
# KEY UPDATE, so an enqueue never makes a claim skip its key.
def unused(alias: str) -> str:
    """No job of the key in ``alias`` needs its row: one index probe per part."""
    probe = f"(SELECT 1 FROM kiln_jobs j WHERE j.conc_key = {alias}.conc_key AND {{}} LIMIT 1)"
    parts = ("j.state = 'available'", "j.state = 'running'",
             "j.conc_key IS NOT NULL AND j.state IN ('awaiting', 'pending', 'scheduled')",
             f"j.{ENDING.replace('attempt_running', 'j.attempt_running')}")
    return " AND ".join(f"{probe.format(p)} IS NULL" for p in parts)


PRUNE_LOCK = (
    "SELECT c.conc_key FROM kiln_concurrency_keys c WHERE c.conc_key NOT LIKE 'queue:%%'"
    " AND c.last_claimed_at < now() - %s * interval '1 second'"
    f" AND {unused('c')} LIMIT %s FOR UPDATE OF c SKIP LOCKED"
)
PRUNE = (
    "WITH d AS (DELETE FROM kiln_concurrency_keys c WHERE c.conc_key = ANY(%s::text[])"
    f" AND {unused('c')} RETURNING 1) SELECT count(*) FROM d"
)


def keys_prune(idle_for: float, limit: int) -> Plan[int]:
    """Delete up to ``limit`` rows of keys (not queues) no job uses and not claimed
    from for ``idle_for`` seconds (see PRUNE_LOCK above)."""
    locked = (yield step(Stmt(PRUNE_LOCK, (idle_for, limit))))[0]
    keys = [str(r[0]) for r in locked]
    if not keys:
        return 0
    rows = (yield step(Stmt(PRUNE, (keys,)), last=True))[0]
    return int(rows[0][0])
