"""PostgreSQL plans for global concurrency limits (kiln._concurrency): the limited claim,
the declaration of queue limits, and the running jobs by key group.

The limited claim is one transaction of two statements. The first locks the rows of
the keys whose jobs wait in the queue (``FOR UPDATE SKIP LOCKED``: a key another server
is claiming is skipped, never waited on), least recently served first, and the row of
the queue's own limit if it has one. The second runs with a snapshot taken after those
locks were granted (READ COMMITTED): whatever the previous holder of a lock claimed is
committed and visible, so counting a key's running jobs there is exact, and at most
``max - running`` of its jobs are taken. Nothing is counted in a table of its own: a job
that leaves ``running`` (completed, failed, retried, cancelled, rescued, handed back)
frees its slot by that alone. Owns these statements only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kiln._concurrency import group_of, queue_group
from kiln._job import JobRow
from kiln.stores.postgres._jobs import CLAIM_COLS, JOB_COLS, claimed
from kiln.stores.postgres._plan import Plan, Stmt, one, step

_UNPAUSED = (
    "NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p WHERE p.queue IN (%(q)s, '*'))"
)
# keys with a free slot (by this snapshot; the claim counts again after the lock) and
# an available job in the queue, least recently served first
LOCK_KEYS = (
    "SELECT c.conc_key, c.max FROM kiln_concurrency_keys c WHERE EXISTS (SELECT 1"
    " FROM kiln_jobs j WHERE j.conc_key = c.conc_key AND j.state = 'available'"
    " AND j.queue = %s AND j.kind = ANY(%s::text[]))"
    " AND (SELECT count(*) FROM kiln_jobs r WHERE r.conc_key = c.conc_key"
    " AND r.state = 'running') < c.max"
    " ORDER BY c.last_claimed_at, c.conc_key LIMIT %s FOR UPDATE OF c SKIP LOCKED"
)
QUEUE_LIMIT = "SELECT max FROM kiln_concurrency_keys WHERE conc_key = %s"
LOCK_QUEUE = "SELECT max FROM kiln_concurrency_keys WHERE conc_key = %s FOR UPDATE SKIP LOCKED"

# $keys, $ords in lock order; the plain jobs of the queue come in too (a limited queue's
# plain jobs count against the queue's limit). Fairness: the first job of every key
# before the second of any, then priority.
CLAIM_LIMITED = (
    "WITH k AS (SELECT * FROM unnest(%(keys)s::text[], %(maxes)s::int[], %(ords)s::int[])"
    " AS k(conc_key, max, ord)),"
    " f AS (SELECT k.*, k.max - (SELECT count(*) FROM kiln_jobs r WHERE r.conc_key = k.conc_key"
    "  AND r.state = 'running') AS free FROM k),"
    " lim AS (SELECT c.id, c.priority, c.run_at, f.ord,"
    "  row_number() OVER (PARTITION BY f.conc_key ORDER BY c.priority, c.run_at, c.id) AS rn"
    "  FROM f CROSS JOIN LATERAL (SELECT j.id, j.priority, j.run_at FROM kiln_jobs j"
    "  WHERE j.conc_key = f.conc_key AND j.state = 'available' AND j.queue = %(q)s"
    "  AND j.kind = ANY(%(kinds)s::text[]) ORDER BY j.priority, j.run_at, j.id"
    "  LIMIT least(greatest(f.free, 0), %(limit)s) FOR UPDATE SKIP LOCKED) c),"
    " pln AS (SELECT j.id, j.priority, j.run_at, -1 AS ord,"
    "  row_number() OVER (ORDER BY j.priority, j.run_at, j.id) AS rn FROM (SELECT id,"
    "  priority, run_at FROM kiln_jobs WHERE state = 'available' AND queue = %(q)s"
    "  AND (conc_key IS NULL) AND kind = ANY(%(kinds)s::text[])"
    "  ORDER BY priority, run_at, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) j),"
    " picked AS (SELECT id FROM (SELECT * FROM lim UNION ALL SELECT * FROM pln) x"
    f" WHERE {_UNPAUSED} ORDER BY rn, priority, ord, run_at, id"
    " LIMIT least(%(limit)s::int, greatest(coalesce(%(qmax)s::int - (SELECT count(*)"
    "  FROM kiln_jobs WHERE state = 'running' AND queue = %(q)s), %(limit)s::int), 0))),"
    " upd AS (UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1,"
    "  attempted_at = now(), server_id = %(server)s WHERE id IN (SELECT id FROM picked)"
    f"  RETURNING {CLAIM_COLS}, conc_key AS ck),"
    " served AS (UPDATE kiln_concurrency_keys SET last_claimed_at = now()"
    "  WHERE conc_key IN (SELECT ck FROM upd WHERE ck IS NOT NULL))"
    f" SELECT {JOB_COLS} FROM upd"
)


def _positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with its %(name)s placeholders as %s, and the names in their order."""
    names = tuple(re.findall(r"%\((\w+)\)s", sql))
    return re.sub(r"%\((\w+)\)s", "%s", sql), names


CLAIM_SQL, CLAIM_NAMES = _positional(CLAIM_LIMITED)


def claim(
    queue: str, kinds: list[str], limit: int, server_id: str
) -> Plan[list[JobRow]]:
    """The claim of a pool whose queue may hold limited jobs (see module docstring)."""
    if not kinds or limit <= 0:
        return []
    qkey = queue_group(queue)
    out = yield step(
        Stmt(QUEUE_LIMIT, (qkey,)), Stmt(LOCK_QUEUE, (qkey,)),
        Stmt(LOCK_KEYS, (queue, kinds, limit)),
    )
    limited_queue, locked_queue, keys = out
    if limited_queue and not locked_queue:  # another server is claiming from it
        return []
    qmax = int(locked_queue[0][0]) if locked_queue else None
    params: dict[str, Any] = {
        "keys": [r[0] for r in keys], "maxes": [int(r[1]) for r in keys],
        "ords": list(range(len(keys))), "q": queue, "kinds": kinds, "limit": limit,
        "qmax": qmax, "server": server_id,
    }
    stmt = Stmt(CLAIM_SQL, tuple(params[n] for n in CLAIM_NAMES), prepare=True)
    rows = (yield step(stmt, last=True))[0]
    return claimed(rows)


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

