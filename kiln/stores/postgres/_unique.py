"""PostgreSQL: inserting unique jobs (kiln.Unique) against the partial unique index.

One statement inserts a batch with ON CONFLICT DO NOTHING and, for every job it did
not insert, reads the id of the job that holds the key: a batch costs one round trip
whatever its duplicates. A duplicate committed after the statement's snapshot was
taken is skipped by the insert but invisible to its read: those few are looked up
again (or inserted, if that job left its counted states meanwhile) in a next round.
Owns these statements only; the batch arrives deduplicated by key (see _rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln._errors import StoreError
from kiln._job import EnqueueResult, NewJob
from kiln.stores._rows import args_text, dumps, epoch
from kiln.stores.postgres._jobs import holds_key, notify_from, rate_limit_stmt, text_array
from kiln.stores.postgres._plan import Plan, Rows, Step, Stmt

COUNTED = holds_key("kiln_jobs")  # the predicate of kiln_jobs_unique, for ON CONFLICT
_COLS = (
    ("q", "text"), ("k", "text"), ("a", "text"), ("m", "text"), ("p", "int"),
    ("ra", "float8"), ("d", "float8"), ("ma", "int"), ("tmo", "float8"), ("b", "text"),
    ("rk", "text"), ("uk", "text"), ("us", "int"), ("per", "float8"), ("tg", "text"),
)
INSERT_UNIQUE = (
    "WITH t AS (SELECT u.*,"
    " coalesce(to_timestamp(u.ra), now() + u.d * interval '1 second') AS r,"
    " CASE WHEN u.per IS NULL THEN u.uk"
    " ELSE u.uk || '@' || floor(extract(epoch FROM now()) / u.per)::bigint END AS key"
    f" FROM unnest({', '.join(f'%b::{t}[]' for _, t in _COLS)}) WITH ORDINALITY"
    f" AS u({', '.join(n for n, _ in _COLS)}, ord)),"
    " ins AS (INSERT INTO kiln_jobs (queue, kind, state, args, metadata, priority, run_at,"
    " max_attempts, timeout, backoff, rate_key, unique_key, unique_states, tags)"
    " SELECT t.q, t.k, CASE WHEN t.rk IS NOT NULL THEN 'pending'"
    " WHEN t.r > now() THEN 'scheduled' ELSE 'available' END,"
    " t.a::jsonb, t.m::jsonb, t.p, t.r, t.ma, t.tmo, t.b::jsonb, t.rk, t.key, t.us,"
    " coalesce(t.tg::text[], '{}')"
    f" FROM t ON CONFLICT (unique_key) WHERE {COUNTED} DO NOTHING"
    " RETURNING id, unique_key, queue, state, run_at)"
    f"{notify_from('ins')}"
    " SELECT t.ord, ins.id, CASE WHEN ins.id IS NULL THEN (SELECT o.id FROM kiln_jobs o"
    f" WHERE o.unique_key = t.key AND {holds_key('o')} LIMIT 1) END"
    " FROM t LEFT JOIN ins ON ins.unique_key = t.key"
    " WHERE (SELECT count(*) FROM kiln_notify) >= 0"
)
ROUNDS = 5  # a key whose holder keeps finishing between our insert and read: give up


def _params(jobs: Sequence[NewJob]) -> list[list[Any]]:
    cols: list[list[Any]] = [[] for _ in _COLS]
    for job in jobs:
        values = (
            job.queue, job.kind, args_text(job), dumps(job.metadata) if job.metadata else "{}",
            job.priority, None if job.run_at is None else epoch(job.run_at),
            float(max(job.delay, 0.0)), job.max_attempts, job.timeout,
            None if job.backoff is None else dumps(job.backoff), job.rate_key,
            job.unique_key, job.unique_states, job.unique_period, text_array(job.tags),
        )
        for col, value in zip(cols, values, strict=True):
            col.append(value)
    return cols


def insert(jobs: Sequence[NewJob]) -> Plan[list[EnqueueResult]]:
    """Insert unique ``jobs`` (distinct keys); results in input order."""
    results: list[EnqueueResult | None] = [None] * len(jobs)
    todo = list(range(len(jobs)))
    limits = {j.rate_key: j.rate_limit for j in jobs if j.rate_key and j.rate_limit}
    for _round in range(ROUNDS):
        batch = [jobs[i] for i in todo]
        pre = [rate_limit_stmt(limits)] if limits and _round == 0 else []
        # later rounds: on their own (a transaction of the first is committed already)
        ins = Stmt(INSERT_UNIQUE, tuple(_params(batch)), prepare=True)
        out: list[Rows] = yield Step((*pre, ins), last=_round == 0)
        missing = []
        for ordinal, new_id, held_by in out[-1]:  # in any order: placed by ordinal
            index = todo[ordinal - 1]
            if new_id is not None:
                results[index] = EnqueueResult(new_id, True)
            elif held_by is not None:
                results[index] = EnqueueResult(held_by, False)
            else:
                missing.append(index)
        if not missing:
            return [r for r in results if r is not None]
        todo = missing
    raise StoreError(
        "job_insert", f"{len(todo)} unique jobs kept losing their key's holder: not enqueued"
    )
