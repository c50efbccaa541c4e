"""PostgreSQL: inserting unique jobs (kiln.Unique) against the partial unique index.

One statement inserts a batch with ON CONFLICT DO NOTHING and returns the id of every
job it inserted; only when it did not insert them all, it also returns their keys and
the id and key of the jobs that hold the others' keys: a batch costs one round trip
whatever its duplicates. All inserted, the ids in ascending order are the jobs' in
input order (as for a plain insert); otherwise the results are placed by key here (no
join or sort in the statement). The holders are read with the statement's snapshot,
which does not see the rows it inserts itself, so what it finds holds a key we did not
take. A duplicate committed after that snapshot was taken is skipped by the insert but
invisible to the read: those few are looked up again (or inserted, if that job left its
counted states meanwhile) in a next round. Columns whose value every job of the batch
shares are sent once, as the plain insert does, and the keys once for both parts. Owns
these statements only; the batch arrives deduplicated by key (see _rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln._errors import StoreError
from kiln._model._job import EnqueueResult, NewJob
from kiln.stores.postgres._insert import (
    INSERT_COLS,
    concurrency_keys_stmt,
    holds_key,
    insert_columns,
    notify_from,
    rate_limit_stmt,
    text_array,
)
from kiln.stores.postgres._plan import Plan, Rows, Step, Stmt

COUNTED = holds_key("kiln_jobs")  # the predicate of kiln_jobs_unique, for ON CONFLICT
_COLS = (*INSERT_COLS, ("uk", "text"), ("us", "int"), ("per", "float8"), ("tg", "text"),
         ("ck", "text"))
_RAW = frozenset({"a", "uk"})  # always one value per job
# the stored key: the job's, plus the bucket of the database clock for a period
_KEY = (
    "CASE WHEN {per} IS NULL THEN {uk}"
    " ELSE {uk} || '@' || floor(extract(epoch FROM now()) / {per})::bigint END"
)
_PICKED = ", ".join(
    f"u.{n}" if n in _RAW else f"coalesce(u.{n}, %(s_{n})b::{t}) AS {n}" for n, t in _COLS
)
# named parameters: the holders' read takes the keys and periods the insert was sent
# (one parameter each, referenced twice), not a second copy of them
INSERT_UNIQUE = (
    "WITH ins AS (INSERT INTO kiln_jobs (queue, kind, state, args, metadata, priority, run_at,"
    " max_attempts, timeout, backoff, rate_key, unique_key, unique_states, tags, conc_key)"
    " SELECT t.q, t.k, CASE WHEN t.rk IS NOT NULL THEN 'pending'"
    " WHEN t.r > now() THEN 'scheduled' ELSE 'available' END,"
    " t.a::jsonb, t.m::jsonb, t.p, t.r, t.ma, t.tmo, t.b::jsonb, t.rk, t.key, t.us,"
    " coalesce(t.tg::text[], '{}'), t.ck"
    " FROM (SELECT t.*, coalesce(to_timestamp(t.ra), now() + t.d * interval '1 second') AS r,"
    f" {_KEY.format(per='t.per', uk='t.uk')} AS key"
    f" FROM (SELECT {_PICKED} FROM unnest({', '.join(f'%(a_{n})b::{t}[]' for n, t in _COLS)})"
    f" AS u({', '.join(n for n, _ in _COLS)})) AS t) AS t"
    f" ON CONFLICT (unique_key) WHERE {COUNTED} DO NOTHING"
    " RETURNING id, unique_key, queue, state, run_at)"
    f"{notify_from('ins')}"
    # the inserted rows' keys only when some were not inserted: all inserted, their
    # ids in ascending order are the jobs' in input order (as the plain insert's)
    " SELECT id, CASE WHEN (SELECT count(*) FROM ins) < %(n)b::int THEN unique_key END, true"
    " FROM ins WHERE (SELECT count(*) FROM kiln_notify) >= 0"
    " UNION ALL SELECT o.id, o.unique_key, false FROM kiln_jobs o"
    " WHERE (SELECT count(*) FROM ins) < %(n)b::int AND o.unique_key IN ("
    f"SELECT {_KEY.format(per='coalesce(x.per, %(s_per)b::float8)', uk='x.uk')}"
    " FROM unnest(%(a_uk)b::text[], %(a_per)b::float8[]) AS x(uk, per))"
    f" AND {holds_key('o')}"
)
ROUNDS = 5  # a key whose holder keeps finishing between our insert and read: give up


def _params(jobs: Sequence[NewJob]) -> dict[str, Any]:
    """The statement's parameters: per column, its scalar when every job shares its
    value (and an empty array), else its array."""
    cols = [*insert_columns(jobs), [j.unique_key for j in jobs], [j.unique_states for j in jobs],
            [j.unique_period for j in jobs], [text_array(j.tags) for j in jobs],
            [j.conc_key for j in jobs]]
    params: dict[str, Any] = {"n": len(jobs)}
    for (name, _), col in zip(_COLS, cols, strict=True):
        first = col[0]
        if name in _RAW or col.count(first) != len(col):  # one type per column (insert_columns)
            params[f"a_{name}"] = col
            if name not in _RAW:
                params[f"s_{name}"] = None
        else:
            params[f"s_{name}"] = first
            params[f"a_{name}"] = []
    return params


def insert(
    jobs: Sequence[NewJob], *, alone: bool, declared: bool = False
) -> Plan[list[EnqueueResult]]:
    """Insert unique ``jobs`` (distinct keys); results in input order.

    The rows go in the order of their keys: two producers whose batches share keys
    then wait on each other's index entries in one order, never in a cycle (inserted
    in each batch's own order they deadlocked). So the ids of a batch's unique jobs
    follow their keys, not the batch's order. ``alone``: these jobs are the whole
    plan and there is one of them, so its first round may commit on its own (a later
    round then only inserts that job, or finds its holder); otherwise every round runs
    in the caller's transaction and the runner commits after the last. ``declared``:
    the rate limits were declared already."""
    order = sorted(range(len(jobs)), key=lambda i: jobs[i].unique_key or "")
    ordered = [jobs[i] for i in order]
    results: list[EnqueueResult | None] = [None] * len(jobs)
    todo = list(range(len(ordered)))
    limits = {} if declared else {
        j.rate_key: j.rate_limit for j in ordered if j.rate_key and j.rate_limit
    }
    keys = {j.conc_key: j.conc_max for j in ordered if j.conc_key is not None}
    for _round in range(ROUNDS):
        batch = [ordered[i] for i in todo]
        pre = [rate_limit_stmt(limits)] if limits and _round == 0 else []
        if keys:  # every round: a later one may run in a transaction of its own
            pre.append(concurrency_keys_stmt(keys))
        ins = Stmt(INSERT_UNIQUE, named=_params(batch), prepare=True)
        out: list[Rows] = yield Step((*pre, ins), last=alone and _round == 0)
        todo = _placed(out[-1], ordered, todo, results)
        if not todo:
            placed = [r for r in results if r is not None]
            back: list[EnqueueResult] = [placed[0]] * len(jobs)
            for position, index in enumerate(order):
                back[index] = placed[position]
            return back
    raise StoreError(
        "job_insert", f"{len(todo)} unique jobs kept losing their key's holder: not enqueued"
    )


def _placed(
    rows: Rows, jobs: Sequence[NewJob], todo: list[int], results: list[EnqueueResult | None]
) -> list[int]:
    """Place one round's rows into ``results`` (by position in ``jobs``); the positions
    of ``todo`` still without a result (their holder was not seen: another round)."""
    if len(rows) == len(todo) and rows[0][1] is None:  # all inserted, no key sent
        new = int.__new__  # an inserted job's result: the class's inserted=True
        for index, job_id in zip(todo, sorted(r[0] for r in rows), strict=True):
            results[index] = new(EnqueueResult, job_id)
        return []
    found: dict[str, EnqueueResult] = {}
    for job_id, stored_key, inserted in rows:
        key = stored_key.split("@", 1)[0]  # without a period's bucket
        if inserted or key not in found:  # ours wins over a holder seen finishing
            found[key] = EnqueueResult(job_id, inserted)
    missing = []
    for index in todo:
        result = found.get(jobs[index].unique_key or "")
        if result is None:
            missing.append(index)
        else:
            results[index] = result
    return missing
