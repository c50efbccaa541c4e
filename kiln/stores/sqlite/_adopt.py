"""SQLite statements that apply a kind's declaration to the jobs that wait
(kiln._model._adoption): see the PostgreSQL module of the same name.

The writes run inside ``write`` (BEGIN IMMEDIATE): the one writer, so a read and the
write after it see the same rows. Every write is conditioned on the job still waiting.
Owns these statements only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence

from kiln._model._adoption import Adoption, WaitingJob
from kiln._model._concurrency import key_prefix, kind_group
from kiln.stores._rows import dumps, loads
from kiln.stores.sqlite._jobs import concurrency_keys_declare_of

WAITING = "('awaiting', 'pending', 'scheduled', 'available')"


_UNKEY = (
    "state = 'available' AND kind = ? AND conc_key IN (SELECT conc_key FROM"
    " kiln_concurrency_keys WHERE conc_key = ? OR substr(conc_key, 1, ?) = ?)"
)
_RESIZED = "(conc_key = ? OR substr(conc_key, 1, ?) = ?) AND max <> ?"


def _of(kind: str) -> tuple[str, str, int, str]:
    prefix = key_prefix(kind)
    return kind, kind_group(kind), len(prefix), prefix


def unkey_probe(conn: sqlite3.Connection, kinds: Sequence[str]) -> bool:
    """Whether ``unkey`` has anything to do: a read, so that a pass with nothing to
    clear does not take the one writer's lock."""
    return any(conn.execute(f"SELECT 1 FROM kiln_jobs WHERE {_UNKEY} LIMIT 1", _of(kind))
               .fetchone() for kind in sorted(set(kinds)))


def resize_probe(conn: sqlite3.Connection, limits: Mapping[str, int]) -> bool:
    """Whether ``resize`` has a row to write (a read: see ``unkey_probe``)."""
    return any(conn.execute(f"SELECT 1 FROM kiln_concurrency_keys WHERE {_RESIZED} LIMIT 1",
                            (*_of(kind)[1:], limit)).fetchone()
               for kind, limit in sorted(limits.items()))


def unkey(conn: sqlite3.Connection, kinds: Sequence[str]) -> dict[str, int]:
    """Available jobs of kinds whose limit was removed become plain (the others when
    they are available: see the PostgreSQL plan)."""
    released: dict[str, int] = {}
    for kind in sorted(set(kinds)):
        for (queue,) in conn.execute(
            f"UPDATE kiln_jobs SET conc_key = NULL WHERE {_UNKEY} RETURNING queue", _of(kind)
        ).fetchall():
            released[queue] = released.get(queue, 0) + 1
    return released


def resize(conn: sqlite3.Connection, limits: Mapping[str, int]) -> int:
    changed = 0
    for kind, limit in sorted(limits.items()):
        changed += conn.execute(
            f"UPDATE kiln_concurrency_keys SET max = ? WHERE {_RESIZED}",
            (limit, *_of(kind)[1:], limit),
        ).rowcount
    return changed


_WAITING_COLS = "id, kind, args, conc_key, defaulted"


def _waiting(rows: list[sqlite3.Row]) -> list[WaitingJob]:
    return [WaitingJob(id=int(r[0]), kind=str(r[1]), args=loads(r[2]), conc_key=r[3],
                       defaulted=int(r[4])) for r in rows]


def waiting(conn: sqlite3.Connection, kind: str, after_id: int, limit: int) -> list[WaitingJob]:
    return _waiting(conn.execute(
        f"SELECT {_WAITING_COLS} FROM kiln_jobs WHERE kind = ? AND state IN {WAITING}"
        " AND unique_key IS NULL AND id > ? ORDER BY id LIMIT ?", (kind, after_id, limit),
    ).fetchall())


def undeclared(conn: sqlite3.Connection, kinds: Sequence[str], limit: int) -> list[WaitingJob]:
    """Through kiln_jobs_undeclared (the waiting jobs enqueued without a declaration)."""
    names = sorted(set(kinds))
    if not names:
        return []
    return _waiting(conn.execute(
        f"SELECT {_WAITING_COLS} FROM kiln_jobs WHERE kind IN ({','.join('?' * len(names))})"
        f" AND defaulted <> 0 AND state IN {WAITING} ORDER BY id LIMIT ?", (*names, limit),
    ).fetchall())


def rekey(conn: sqlite3.Connection, keys: Mapping[int, str], maxes: Mapping[str, int],
          running_on: str | None = None) -> int:
    """Set the jobs' keys (the key rows first, written as an insert writes them): of
    waiting jobs, or of jobs running under ``running_on``."""
    concurrency_keys_declare_of(conn, maxes)
    which, more = ((f"state IN {WAITING}", ()) if running_on is None
                   else ("state = 'running' AND server_id = ?", (running_on,)))
    return sum(conn.execute(
        f"UPDATE kiln_jobs SET conc_key = ? WHERE id = ? AND {which}", (key, job_id, *more),
    ).rowcount for job_id, key in sorted(keys.items()))


ADOPT = (
    "UPDATE kiln_jobs SET"
    " queue = CASE WHEN defaulted & 1 <> 0 THEN :queue ELSE queue END,"
    " max_attempts = CASE WHEN defaulted & 2 <> 0 THEN :ma ELSE max_attempts END,"
    " priority = CASE WHEN defaulted & 4 <> 0 THEN :pr ELSE priority END,"
    " timeout = CASE WHEN defaulted & 8 <> 0 THEN :tmo ELSE timeout END,"
    " tags = CASE WHEN defaulted & 16 <> 0 THEN :tags ELSE tags END,"
    " rate_key = CASE WHEN defaulted & 32 <> 0 THEN :rk ELSE rate_key END,"
    " state = CASE WHEN defaulted & 32 <> 0 AND :rk IS NOT NULL"
    " AND state IN ('available', 'scheduled') THEN 'pending' ELSE state END,"
    " conc_key = CASE WHEN defaulted & 64 <> 0 THEN :key ELSE conc_key END,"
    " defaulted = 0"
    f" WHERE id = :id AND kind = :kind AND defaulted <> 0 AND state IN {WAITING}"
    " RETURNING queue, state"
)


def adopt(conn: sqlite3.Connection, a: Adoption) -> dict[str, int]:
    """Apply ``a`` (see the PostgreSQL plan); returns queue -> its jobs available now."""
    keys = {a.keys[i]: a.conc_max for i in a.ids if i in a.keys}
    concurrency_keys_declare_of(conn, keys)
    common = {"queue": a.queue, "ma": a.max_attempts, "pr": a.priority, "tmo": a.timeout,
              "tags": dumps(list(a.tags)) if a.tags else None, "rk": a.rate_key,
              "kind": a.kind}
    released: dict[str, int] = {}
    for job_id in sorted(a.ids):
        row = conn.execute(ADOPT, {**common, "id": job_id, "key": a.keys.get(job_id)}
                           ).fetchone()
        if row is not None and row[1] == "available":
            released[row[0]] = released.get(row[0], 0) + 1
    return released
