"""MySQL/MariaDB: inserting unique jobs (kiln.Unique) against kiln_jobs_unique.

MySQL has no partial index and no ON CONFLICT DO NOTHING: the unique index is over
the virtual column unique_active (the key while the job's state counts, else NULL).
A batch is one transaction of one round trip: a multi-row INSERT whose ON DUPLICATE
KEY UPDATE changes nothing but notes the holder's id in a session variable, then a
read of the holder of every key (ours, uncommitted, or the one we collided with).
A key whose holder left its counted states in between (or whose period bucket turned
between the two statements) is inserted again on its own: ``INSERT ... ON DUPLICATE
KEY UPDATE id = LAST_INSERT_ID(id)`` reports the id either way and whether it inserted.
Owns these statements only; the batch arrives deduplicated by key (_rows.UniqueSplit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln._job import EnqueueResult, NewJob
from kiln.stores.mysql._jobs import _INSERT, _VALUES, _values, rate_limit_stmt
from kiln.stores.mysql._plan import Plan, Step, Stmt

# the key, and for a period the bucket of the database clock's epoch seconds
_KEY = "CONCAT(%s, IF(%s IS NULL, '', CONCAT('@', FLOOR(UNIX_TIMESTAMP() / %s))))"
INSERT_UNIQUE = (
    _INSERT.replace(") VALUES ", ", unique_key, unique_states) VALUES ")
    + _VALUES[:-1] + f", {_KEY}, %s)"
    + " ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)"
)


NOTE_DUPLICATE = (
    " ON DUPLICATE KEY UPDATE id = IF((@kiln_dups := CONCAT(@kiln_dups, ',', id)) > '', id, id)"
)


def _row(job: NewJob) -> list[Any]:
    return [*_values(job, False), job.unique_key, job.unique_period, job.unique_period,
            job.unique_states]


def _plain_row(job: NewJob) -> list[Any]:
    """_row for a key without a period: the key itself, no expression to send."""
    return [*_values(job, False), job.unique_key, job.unique_states]


def insert(jobs: Sequence[NewJob]) -> Plan[list[EnqueueResult]]:
    """Insert unique ``jobs`` (distinct keys); results in input order."""
    limits = {j.rate_key: j.rate_limit for j in jobs if j.rate_key and j.rate_limit}
    pre = [rate_limit_stmt(limits)] if limits else []
    head = _INSERT.replace(") VALUES ", ", unique_key, unique_states) VALUES ")
    if all(j.unique_period is None for j in jobs):  # the common case: keys sent as they are
        values, key = _VALUES[:-1] + ", %s, %s)", "%s"
        rows = [p for j in jobs for p in _plain_row(j)]
        keys: list[Any] = [j.unique_key for j in jobs]
    else:
        values, key = _VALUES[:-1] + f", {_KEY}, %s)", _KEY
        rows = [p for j in jobs for p in _row(j)]
        keys = [p for j in jobs for p in (j.unique_key, j.unique_period, j.unique_period)]
    out = yield Step((
        *pre,
        Stmt("SET @kiln_dups = ''"),
        Stmt(head + ", ".join([values] * len(jobs)) + NOTE_DUPLICATE, rows),
        Stmt("SELECT @kiln_dups"),
        Stmt(f"SELECT id, unique_active FROM kiln_jobs WHERE unique_active IN"
             f" ({', '.join([key] * len(jobs))})", keys),
    ), begin=True, last=True)
    duplicates = {int(x) for x in str(out[-2].rows[0][0] or "").split(",") if x}
    holders = {str(key).split("@")[0]: int(job_id) for job_id, key in out[-1].rows}
    results: list[EnqueueResult | None] = []
    for job in jobs:
        holder = holders.get(str(job.unique_key))
        results.append(None if holder is None else EnqueueResult(holder, holder not in duplicates))
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        again = yield Step(tuple(Stmt(INSERT_UNIQUE, _row(jobs[i])) for i in missing),
                           last=True)
        for i, r in zip(missing, again, strict=True):
            results[i] = EnqueueResult(int(r.lastrowid or 0), r.rowcount == 1)
    return [r for r in results if r is not None]
