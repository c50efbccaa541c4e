"""MySQL/MariaDB plans that apply a kind's declaration to the jobs that wait
(kiln._model._adoption): see the PostgreSQL module of the same name.

MySQL evaluates an UPDATE's assignments left to right, each seeing the ones before:
``defaulted`` is cleared last, and every condition reads it or a parameter. Every write
is conditioned on the job still waiting. Owns these statements only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kiln._model._adoption import Adoption, WaitingJob
from kiln._model._concurrency import key_prefix, kind_group
from kiln.stores._rows import dumps, loads
from kiln.stores.mysql._concurrency import declare_stmts
from kiln.stores.mysql._plan import Plan, Row, Stmt, marks, one, step

WAITING = "('awaiting', 'pending', 'scheduled', 'available')"
_OF_KIND = (
    "kind = %s AND conc_key IN (SELECT conc_key FROM kiln_concurrency_keys"
    " WHERE conc_key = %s OR LEFT(conc_key, %s) = %s)"
)


def _of(kind: str) -> list[Any]:
    prefix = key_prefix(kind)
    return [kind, kind_group(kind), len(prefix), prefix]


def _unkey_where(names: list[str]) -> tuple[str, list[Any]]:
    where = " OR ".join([f"({_OF_KIND})"] * len(names))
    return f"state = 'available' AND ({where})", [p for k in names for p in _of(k)]


def unkey_probe(kinds: Sequence[str]) -> Plan[bool]:
    """Whether ``unkey`` has anything to do: a read, so that a pass with nothing to
    clear does not take the kept connection the heartbeat writes on."""
    names = sorted(set(kinds))
    if not names:
        return False
    where, params = _unkey_where(names)
    out = yield one(f"SELECT 1 FROM kiln_jobs WHERE {where} LIMIT 1", *params)
    return bool(out[0].rows)


def unkey(kinds: Sequence[str]) -> Plan[dict[str, int]]:
    """Available jobs of kinds whose limit was removed become plain (the others when
    they are available: see the PostgreSQL plan)."""
    names = sorted(set(kinds))
    if not names:
        return {}
    where, params = _unkey_where(names)
    out = yield step(
        Stmt(f"SELECT queue, COUNT(*) FROM kiln_jobs WHERE {where} GROUP BY queue", params),
        Stmt(f"UPDATE kiln_jobs SET conc_key = NULL WHERE {where}", params),
        begin=True, last=True,
    )
    return {str(r[0]): int(r[1]) for r in out[0].rows} if out[1].rowcount else {}


_RESIZED = "(conc_key = %s OR LEFT(conc_key, %s) = %s) AND max <> %s"


def _resized(kind: str, limit: int) -> list[Any]:
    prefix = key_prefix(kind)
    return [kind_group(kind), len(prefix), prefix, limit]


def resize_probe(limits: Mapping[str, int]) -> Plan[bool]:
    """Whether ``resize`` has a row to write (a read: see ``unkey_probe``)."""
    names = sorted(limits)
    if not names:
        return False
    where = " OR ".join([f"({_RESIZED})"] * len(names))
    out = yield one(f"SELECT 1 FROM kiln_concurrency_keys WHERE {where} LIMIT 1",
                    *[p for k in names for p in _resized(k, limits[k])])
    return bool(out[0].rows)


def resize(limits: Mapping[str, int]) -> Plan[int]:
    names = sorted(limits)
    if not names:
        return 0
    stmts = [Stmt(f"UPDATE kiln_concurrency_keys SET max = %s WHERE {_RESIZED}",
                  [limits[k], *_resized(k, limits[k])]) for k in names]
    out = yield step(*stmts, begin=True, last=True)
    return sum(r.rowcount for r in out)


_WAITING_COLS = "id, kind, args, conc_key, defaulted"


def _waiting(rows: list[Row]) -> list[WaitingJob]:
    return [WaitingJob(id=int(r[0]), kind=str(r[1]), args=loads(r[2]), conc_key=r[3],
                       defaulted=int(r[4])) for r in rows]


def waiting(kind: str, after_id: int, limit: int) -> Plan[list[WaitingJob]]:
    out = yield one(
        f"SELECT {_WAITING_COLS} FROM kiln_jobs WHERE kind = %s AND state IN {WAITING}"
        " AND unique_key IS NULL AND id > %s ORDER BY id LIMIT %s", kind, after_id, limit,
    )
    return _waiting(out[0].rows)


def undeclared(kinds: Sequence[str], limit: int) -> Plan[list[WaitingJob]]:
    """Through kiln_jobs_undeclared: the virtual column is the kind of a waiting job
    enqueued without a declaration, NULL for every other job."""
    names = sorted(set(kinds))
    if not names:
        return []
    out = yield one(
        f"SELECT {_WAITING_COLS} FROM kiln_jobs WHERE undeclared_kind IN ({marks(len(names))})"
        " ORDER BY id LIMIT %s", *names, limit,
    )
    return _waiting(out[0].rows)


def _case_by_id(values: Mapping[int, Any]) -> tuple[str, list[Any]]:
    ids = sorted(values)
    sql = "CASE id " + " ".join(["WHEN %s THEN %s"] * len(ids)) + " END"
    return sql, [x for i in ids for x in (i, values[i])]


def rekey(keys: Mapping[int, str], maxes: Mapping[str, int],
          running_on: str | None = None) -> Plan[int]:
    """Set the jobs' keys (the key rows first, written as an insert writes them): of
    waiting jobs, or of jobs running under ``running_on``."""
    if not keys:
        return 0
    case, params = _case_by_id(keys)
    ids = sorted(keys)
    which, more = ((f"state IN {WAITING}", []) if running_on is None
                   else ("state = 'running' AND server_id = %s", [running_on]))
    out = yield step(
        *declare_stmts(maxes),
        Stmt(f"UPDATE kiln_jobs SET conc_key = {case} WHERE id IN ({marks(len(ids))})"
             f" AND {which}", [*params, *ids, *more]),
        begin=True, last=True,
    )
    return out[-1].rowcount


def adopt(a: Adoption) -> Plan[dict[str, int]]:
    """Apply ``a`` (see the PostgreSQL plan); returns queue -> its jobs available now.
    The jobs still to adopt are locked first, so the answer counts only them."""
    if not a.ids:
        return {}
    found = yield step(Stmt(
        f"SELECT id FROM kiln_jobs WHERE id IN ({marks(len(a.ids))}) AND kind = %s"
        f" AND defaulted <> 0 AND state IN {WAITING} ORDER BY id FOR UPDATE",
        [*sorted(a.ids), a.kind],
    ), begin=True)
    ids = [int(r[0]) for r in found[0].rows]
    if not ids:
        yield step(Stmt("DO 0"), last=True)
        return {}
    m = marks(len(ids))
    keys = {i: a.keys[i] for i in ids if i in a.keys}
    key_sql, key_params = _case_by_id(keys) if keys else ("NULL", [])
    tags = dumps(list(a.tags)) if a.tags else None
    update = Stmt(
        "UPDATE kiln_jobs SET"
        " queue = IF(defaulted & 1 <> 0, %s, queue),"
        " max_attempts = IF(defaulted & 2 <> 0, %s, max_attempts),"
        " priority = IF(defaulted & 4 <> 0, %s, priority),"
        " timeout = IF(defaulted & 8 <> 0, %s, timeout),"
        " tags = IF(defaulted & 16 <> 0, %s, tags),"
        " state = IF(defaulted & 32 <> 0 AND %s IS NOT NULL"
        " AND state IN ('available', 'scheduled'), 'pending', state),"
        " rate_key = IF(defaulted & 32 <> 0, %s, rate_key),"
        f" conc_key = IF(defaulted & 64 <> 0, {key_sql}, conc_key),"
        " defaulted = 0"
        f" WHERE id IN ({m})",
        [a.queue, a.max_attempts, a.priority, a.timeout, tags, a.rate_key, a.rate_key,
         *key_params, *ids],
    )
    declared = declare_stmts({k: a.conc_max for k in keys.values()}) if keys else ()
    out = yield step(
        *declared, update,
        Stmt(f"SELECT queue, COUNT(*) FROM kiln_jobs WHERE id IN ({m})"
             " AND state = 'available' GROUP BY queue", ids),
        last=True,
    )
    return {str(r[0]): int(r[1]) for r in out[-1].rows}
