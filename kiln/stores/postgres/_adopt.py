"""PostgreSQL plans that apply a kind's declaration to the jobs that wait
(kiln._model._adoption): clear or set their concurrency keys, set the max of a kind's
key rows, read the waiting jobs of a kind, and adopt the jobs enqueued without a
declaration.

Every write is conditioned on the job still waiting (``WAITING``): a job claimed
meanwhile keeps what it ran with. Jobs made available in a queue are announced with
NOTIFY as an insert announces them. Owns these statements only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kiln._model._adoption import Adoption, WaitingJob
from kiln._model._concurrency import key_prefix, kind_group
from kiln.stores._rows import loads
from kiln.stores.postgres._insert import (
    NOTIFIED,
    concurrency_keys_stmt,
    notify_from,
    text_array,
)
from kiln.stores.postgres._plan import Plan, Rows, Stmt, one, step

WAITING = "('awaiting', 'pending', 'scheduled', 'available')"
# the key rows of each kind: its group, or a key that starts with its prefix
_KEYS_OF = (
    "u AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[]) AS u(kind, grp, pre)),"
    " k AS (SELECT DISTINCT c.conc_key, u.kind FROM kiln_concurrency_keys c JOIN u"
    " ON c.conc_key = u.grp OR left(c.conc_key, length(u.pre)) = u.pre)"
)
# Available jobs of kinds whose limit was removed: plain jobs from now on. Only the
# available ones: a job that waits in another state is cleared once it is available
# (kiln_jobs_conc_available finds them by key; the others have no index by key).
UNKEY = (
    f"WITH {_KEYS_OF},"
    " rel AS (UPDATE kiln_jobs j SET conc_key = NULL FROM k WHERE j.conc_key = k.conc_key"
    " AND j.kind = k.kind AND j.state = 'available' RETURNING j.queue, j.state, j.run_at)"
    f"{notify_from('rel')} SELECT queue, count(*) FROM rel WHERE {NOTIFIED} GROUP BY queue"
)


def _kinds(kinds: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    names = sorted(set(kinds))
    return names, [kind_group(k) for k in names], [key_prefix(k) for k in names]


def unkey(kinds: Sequence[str]) -> Plan[dict[str, int]]:
    if not kinds:
        return {}
    rows = (yield one(UNKEY, *_kinds(kinds)))[0]
    return {str(r[0]): int(r[1]) for r in rows}


RESIZE = (
    "UPDATE kiln_concurrency_keys c SET max = u.m FROM unnest(%s::text[], %s::text[],"
    " %s::int[]) AS u(grp, pre, m) WHERE (c.conc_key = u.grp"
    " OR left(c.conc_key, length(u.pre)) = u.pre) AND c.max <> u.m"
)


def resize(limits: Mapping[str, int]) -> Plan[int]:
    names = sorted(limits)
    if not names:
        return 0
    rows = yield one(RESIZE + " RETURNING 1", [kind_group(k) for k in names],
                     [key_prefix(k) for k in names], [limits[k] for k in names])
    return len(rows[0])


_WAITING_COLS = "id, kind, args, conc_key, defaulted"
WAITING_OF = (
    f"SELECT {_WAITING_COLS} FROM kiln_jobs WHERE kind = %s AND state IN {WAITING}"
    " AND unique_key IS NULL AND id > %s ORDER BY id LIMIT %s"
)
# kiln_jobs_undeclared: only the jobs enqueued without a declaration, while they wait
UNDECLARED = (
    f"SELECT {_WAITING_COLS} FROM kiln_jobs WHERE kind = ANY(%s::text[]) AND defaulted <> 0"
    f" AND state IN {WAITING} ORDER BY id LIMIT %s"
)


def _waiting(rows: Rows) -> list[WaitingJob]:
    return [WaitingJob(id=int(r[0]), kind=str(r[1]), args=loads(r[2]), conc_key=r[3],
                       defaulted=int(r[4])) for r in rows]


def waiting(kind: str, after_id: int, limit: int) -> Plan[list[WaitingJob]]:
    return _waiting((yield one(WAITING_OF, kind, after_id, limit))[0])


def undeclared(kinds: Sequence[str], limit: int) -> Plan[list[WaitingJob]]:
    if not kinds:
        return []
    return _waiting((yield one(UNDECLARED, sorted(set(kinds)), limit))[0])


REKEY = (
    "UPDATE kiln_jobs j SET conc_key = u.key FROM unnest(%s::bigint[], %s::text[])"
    f" AS u(id, key) WHERE j.id = u.id AND j.state IN {WAITING} RETURNING 1"
)
# a job its server claimed under a key its declaration no longer gives (it hands it back)
REKEY_RUNNING = (
    "UPDATE kiln_jobs j SET conc_key = u.key FROM unnest(%s::bigint[], %s::text[])"
    " AS u(id, key) WHERE j.id = u.id AND j.state = 'running' AND j.server_id = %s"
    " RETURNING 1"
)


def rekey(keys: Mapping[int, str], maxes: Mapping[str, int],
          running_on: str | None = None) -> Plan[int]:
    """Set the jobs' keys (the key rows first, written as an insert writes them): of
    waiting jobs, or of jobs running under ``running_on``."""
    ids = sorted(keys)
    if not ids:
        return 0
    stmt = (Stmt(REKEY, (ids, [keys[i] for i in ids])) if running_on is None
            else Stmt(REKEY_RUNNING, (ids, [keys[i] for i in ids], running_on)))
    rows = yield step(concurrency_keys_stmt(dict(maxes)), stmt, last=True)
    return len(rows[1])


# Each option whose bit a job has takes the declaration's value; a rate key makes an
# available or scheduled job pending (admission decides when it runs, as for a job
# enqueued with it); the bits are cleared.
ADOPT = (
    "WITH u AS (SELECT * FROM unnest(%(ids)s::bigint[], %(keys)s::text[]) AS u(id, key)),"
    " rel AS (UPDATE kiln_jobs j SET"
    " queue = CASE WHEN j.defaulted & 1 <> 0 THEN %(queue)s ELSE j.queue END,"
    " max_attempts = CASE WHEN j.defaulted & 2 <> 0 THEN %(ma)s ELSE j.max_attempts END,"
    " priority = CASE WHEN j.defaulted & 4 <> 0 THEN %(pr)s ELSE j.priority END,"
    " timeout = CASE WHEN j.defaulted & 8 <> 0 THEN %(tmo)s::float8 ELSE j.timeout END,"
    " tags = CASE WHEN j.defaulted & 16 <> 0 THEN coalesce(%(tags)s::text[], '{}')"
    " ELSE j.tags END,"
    " rate_key = CASE WHEN j.defaulted & 32 <> 0 THEN %(rk)s::text ELSE j.rate_key END,"
    " state = CASE WHEN j.defaulted & 32 <> 0 AND %(rk)s::text IS NOT NULL"
    " AND j.state IN ('available', 'scheduled') THEN 'pending' ELSE j.state END,"
    " conc_key = CASE WHEN j.defaulted & 64 <> 0 THEN u.key ELSE j.conc_key END,"
    " defaulted = 0"
    f" FROM u WHERE j.id = u.id AND j.kind = %(kind)s AND j.defaulted <> 0"
    f" AND j.state IN {WAITING} RETURNING j.queue, j.state, j.run_at)"
    f"{notify_from('rel')} SELECT queue, state, count(*) FROM rel WHERE {NOTIFIED}"
    " GROUP BY queue, state"
)


def adopt(a: Adoption) -> Plan[dict[str, int]]:
    """Apply ``a``; returns queue -> its jobs that are available there now."""
    if not a.ids:
        return {}
    ids = sorted(a.ids)
    keys = {a.keys[i]: a.conc_max for i in ids if i in a.keys}
    params = {
        "ids": ids, "keys": [a.keys.get(i) for i in ids], "queue": a.queue,
        "ma": a.max_attempts, "pr": a.priority, "tmo": a.timeout,
        "tags": text_array(a.tags), "rk": a.rate_key, "kind": a.kind,
    }
    stmts = [concurrency_keys_stmt(keys)] if keys else []
    rows = (yield step(*stmts, Stmt(ADOPT, named=params), last=True))[-1]
    return {str(r[0]): int(r[2]) for r in rows if r[1] == "available"}
