"""MySQL/MariaDB: inserting unique jobs (kiln.Unique) against kiln_jobs_unique.

MySQL has no partial index and no ON CONFLICT DO NOTHING: the unique index is over
the virtual column unique_active (the key while the job's state counts, else NULL).
A batch is one round trip: a multi-row INSERT, its rows in key order, whose ON
DUPLICATE KEY UPDATE changes nothing but notes the holder's id in a session variable
(and locks the holder, so it keeps its key until we commit), then a read of the holder
of every key (ours, uncommitted, or the one we collided with), with the keys computed
from the same clock reading as the insert's. At READ COMMITTED (kiln's connections)
that read finds every key; a caller's REPEATABLE READ transaction whose snapshot
predates a holder's commit may not, and such a key is inserted again on its own:
``INSERT ... ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)`` reports the id either
way and whether it inserted, in the same transaction.
Owns these statements only; the batch arrives deduplicated by key (_rows.UniqueSplit).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln._model._job import EnqueueResult, NewJob
from kiln.stores.mysql._columns import INSERT, VALUES, insert_values, rate_limit_stmt
from kiln.stores.mysql._concurrency import declare_stmts
from kiln.stores.mysql._plan import Plan, Step, Stmt

# the key, and for a period the bucket of the database clock's epoch seconds, read once
# per insert (@kiln_t): the holders' read then computes the keys the insert stored, even
# when the second turned between the two statements
_KEY = "CONCAT(%s, IF(%s IS NULL, '', CONCAT('@', FLOOR(@kiln_t / %s))))"
_HEAD = INSERT.replace(") VALUES ", ", unique_key, unique_states) VALUES ")
INSERT_UNIQUE = (
    _HEAD + VALUES[:-1] + f", {_KEY}, %s)" + " ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id)"
)


NOTE_DUPLICATE = (
    " ON DUPLICATE KEY UPDATE id = IF((@kiln_dups := CONCAT(@kiln_dups, ',', id)) > '', id, id)"
)


def _row(job: NewJob) -> list[Any]:
    return [*insert_values(job, False), job.unique_key, job.unique_period, job.unique_period,
            job.unique_states]


def _plain_row(job: NewJob) -> list[Any]:
    """_row for a key without a period: the key itself, no expression to send."""
    return [*insert_values(job, False), job.unique_key, job.unique_states]


def insert(
    jobs: Sequence[NewJob], *, alone: bool, declared: bool = False
) -> Plan[list[EnqueueResult]]:
    """Insert unique ``jobs`` (distinct keys); results in input order.

    The rows go in the order of their keys, so two producers whose batches share keys
    lock them in one order and never deadlock (in each batch's own order they did): the
    ids of a batch's unique jobs follow their keys. ``alone``: one job that is the whole
    plan, whose transaction commits in this trip; otherwise the plan's transaction
    goes on (and commits after its last step). ``declared``: the rate limits were
    declared already."""
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].unique_key or "")
    ordered = [jobs[i] for i in order]
    limits = {} if declared else {
        j.rate_key: j.rate_limit for j in ordered if j.rate_key and j.rate_limit
    }
    pre = [rate_limit_stmt(limits)] if limits else []
    conc = {j.conc_key: j.conc_max for j in ordered if j.conc_key is not None}
    if conc:
        pre.extend(declare_stmts(conc))
    if all(j.unique_period is None for j in ordered):  # the common case: keys as they are
        values, key = VALUES[:-1] + ", %s, %s)", "%s"
        rows = [p for j in ordered for p in _plain_row(j)]
        keys: list[Any] = [j.unique_key for j in ordered]
    else:
        values, key = VALUES[:-1] + f", {_KEY}, %s)", _KEY
        rows = [p for j in ordered for p in _row(j)]
        keys = [p for j in ordered for p in (j.unique_key, j.unique_period, j.unique_period)]
    out = yield Step((
        *pre,
        Stmt("SET @kiln_dups = '', @kiln_t = UNIX_TIMESTAMP()"),
        Stmt(_HEAD + ", ".join([values] * len(ordered)) + NOTE_DUPLICATE, rows),
        Stmt("SELECT @kiln_dups"),
        Stmt(f"SELECT id, unique_active FROM kiln_jobs WHERE unique_active IN"
             f" ({', '.join([key] * len(ordered))})", keys),
    ), begin=True, last=alone)
    duplicates = {int(x) for x in str(out[-2].rows[0][0] or "").split(",") if x}
    holders = {str(key).split("@")[0]: int(job_id) for job_id, key in out[-1].rows}
    results: list[EnqueueResult | None] = []
    for job in ordered:
        holder = holders.get(str(job.unique_key))
        results.append(None if holder is None else EnqueueResult(holder, holder not in duplicates))
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:  # a caller's transaction whose snapshot predates a holder's commit
        again = yield Step(tuple(Stmt(INSERT_UNIQUE, _row(ordered[i])) for i in missing),
                           begin=not alone, last=alone)
        for i, r in zip(missing, again, strict=True):
            results[i] = EnqueueResult(int(r.lastrowid or 0), r.rowcount == 1)
    back: list[EnqueueResult] = [EnqueueResult(0)] * len(jobs)
    for position, index in enumerate(order):
        result = results[position]
        assert result is not None
        back[index] = result
    return back
