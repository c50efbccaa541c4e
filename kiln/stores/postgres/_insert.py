"""PostgreSQL: the vocabulary of inserting jobs, shared by the plain insert (``_jobs``)
and the unique one (``_unique``): the columns sent per job, the NOTIFY a write sends,
the statements that declare rate-limit and concurrency keys, the unique-key predicate.
A leaf: it imports no other statement module of the dialect.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from kiln._model._job import NewJob
from kiln._model._wakeup import CHANNEL, SCHEDULED_PREFIX
from kiln.stores._rows import args_text, dumps, epoch
from kiln.stores.postgres._plan import Stmt


def notify_from(src: str) -> str:
    """A CTE that sends one NOTIFY per queue made available, and one 'scheduled:<epoch>'
    for the earliest scheduled job, from ``src`` (rows with queue, state, run_at).

    Use it as ``WHERE (SELECT count(*) FROM kiln_notify) >= 0`` in the final SELECT,
    which evaluates it once.
    """
    return (
        f", kiln_notify AS (SELECT pg_notify('{CHANNEL}', p) FROM ("
        f"SELECT DISTINCT queue AS p FROM {src} WHERE state = 'available' UNION ALL"
        f" SELECT '{SCHEDULED_PREFIX}' || extract(epoch FROM min(run_at)) FROM {src}"
        f" WHERE state = 'scheduled' HAVING count(*) > 0) AS kiln_payloads)"
    )


NOTIFIED = "(SELECT count(*) FROM kiln_notify) >= 0"


# insert ------------------------------------------------------------------------------
# (name, type) of the insert's columns; all but args are sent as a scalar when every
# job of the batch has the same value, which saves most of the array encoding.
INSERT_COLS = (
    ("q", "text"), ("k", "text"), ("a", "text"), ("m", "text"), ("p", "int"),
    ("ra", "float8"), ("d", "float8"), ("ma", "int"), ("tmo", "float8"), ("b", "text"),
    ("rk", "text"),
)


def text_array(tags: Sequence[str]) -> str | None:
    """Tags as a PostgreSQL array literal (None for none): sent as one text value, so a
    batch of jobs without tags sends one NULL for all of them."""
    if not tags:
        return None
    quoted = ('"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"' for t in tags)
    return "{" + ",".join(quoted) + "}"


@functools.cache
def insert_sql(
    with_deps: bool, with_tags: bool = False, with_conc: bool = False,
    with_defaulted: bool = False,
) -> str:
    """The insert; jobs with tags (or a concurrency key, or options taken from the
    defaults for want of a declaration) take a variant that sets them (and plain batches
    keep the statement they had before tags existed)."""
    unmet = (
        "WHEN EXISTS (SELECT 1 FROM kiln_jobs d WHERE d.id = ANY(t.dps)"
        " AND d.state <> 'completed') THEN 'awaiting' "
        if with_deps
        else ""
    )
    cols = list(INSERT_COLS)
    cols += [("dp", "text")] if with_deps else []
    cols += [("tg", "text")] if with_tags else []
    cols += [("ck", "text")] if with_conc else []
    cols += [("df", "int")] if with_defaulted else []
    picked = ", ".join(
        f"u.{n}" if n == "a" else f"coalesce(u.{n}, %b::{t}) AS {n}" for n, t in cols
    )
    arrays = ", ".join(f"%b::{t}[]" for _, t in cols)
    names = ", ".join(n for n, _ in cols)
    dp = ", t.dp::bigint[] AS dps" if with_deps else ""
    tag_col, tag_value = (", tags", ", coalesce(t.tg::text[], '{}')") if with_tags else ("", "")
    if with_conc:
        tag_col, tag_value = tag_col + ", conc_key", tag_value + ", t.ck"
    if with_defaulted:
        tag_col, tag_value = tag_col + ", defaulted", tag_value + ", t.df"
    return (
        "WITH ins AS (INSERT INTO kiln_jobs (queue, kind, state, args, metadata, priority,"
        f" run_at, max_attempts, timeout, backoff, rate_key{tag_col})"
        f" SELECT t.q, t.k, CASE {unmet}WHEN t.rk IS NOT NULL THEN 'pending'"
        " WHEN t.r > now() THEN 'scheduled' ELSE 'available' END,"
        f" t.a::jsonb, t.m::jsonb, t.p, t.r, t.ma, t.tmo, t.b::jsonb, t.rk{tag_value}"
        " FROM (SELECT t.*, coalesce(to_timestamp(t.ra), now() + t.d * interval '1 second')"
        f" AS r{dp} FROM (SELECT {picked} FROM unnest({arrays}) AS u({names})) AS t) AS t"
        " RETURNING id, queue, state, run_at)"
        f"{notify_from('ins')} SELECT id FROM ins WHERE {NOTIFIED}"
    )


def compact(cols: list[list[Any]]) -> list[Any]:
    """Scalars then arrays, as insert_sql expects: a column whose values are all
    equal is sent as that scalar and an empty array (unnest pads it with NULLs)."""
    scalars: list[Any] = []
    arrays: list[Any] = []
    for (name, _), col in zip(INSERT_COLS, cols, strict=False):
        first = col[0]
        # count() compares in C; each column holds one type (see insert_columns), but for
        # None, which count tells apart from every value
        if name != "a" and col.count(first) == len(col):
            scalars.append(first)
            arrays.append([])
        else:
            if name != "a":
                scalars.append(None)
            arrays.append(col)
    for extra in cols[len(INSERT_COLS):]:  # dependencies: always per job
        scalars.append(None)
        arrays.append(extra)
    return [*scalars, *arrays]


INSERT_FAST = insert_sql(with_deps=False)
# the same without its NOTIFY: the notify limiter's (kiln.stores.postgres._limiter)
INSERT_FAST_QUIET = INSERT_FAST.replace(notify_from("ins"), "").replace(NOTIFIED, "true")


# one job (the web-request path: one ``enqueue`` a call): the same insert from one row
# of scalars, so no array is encoded per call (psycopg dumps arrays in Python)
INSERT_ONE = INSERT_FAST.replace(
    "FROM (SELECT " + ", ".join(
        f"u.{n}" if n == "a" else f"coalesce(u.{n}, %b::{t}) AS {n}" for n, t in INSERT_COLS)
    + " FROM unnest(" + ", ".join(f"%b::{t}[]" for _, t in INSERT_COLS) + ") AS u("
    + ", ".join(n for n, _ in INSERT_COLS) + ")) AS t",
    "FROM (SELECT " + ", ".join(f"%b::{t} AS {n}" for n, t in INSERT_COLS) + ") AS t",
)
assert INSERT_ONE != INSERT_FAST
INSERT_ONE_QUIET = INSERT_ONE.replace(notify_from("ins"), "").replace(NOTIFIED, "true")


def one_row(job: NewJob) -> tuple[Any, ...]:
    """INSERT_ONE's parameters: the columns of insert_columns for one job."""
    run_at, timeout, backoff, delay = job.run_at, job.timeout, job.backoff, job.delay
    metadata = job.metadata
    return (
        job.queue, job.kind, args_text(job), dumps(metadata) if metadata else "{}",
        int(job.priority), None if run_at is None else epoch(run_at),
        float(delay) if delay > 0 else 0.0, int(job.max_attempts),
        None if timeout is None else float(timeout),
        None if backoff is None else dumps(backoff), job.rate_key,
    )


INSERT_DEPS = insert_sql(with_deps=True)


INSERT_TAGGED = {deps: insert_sql(with_deps=deps, with_tags=True) for deps in (False, True)}


# Locks the dependencies (in id order) for the check in INSERT_DEPS and marks them
# has_dependents, so their completion takes the release path (see RESULTS_APPLY).
MARK_DEPS = (
    "UPDATE kiln_jobs SET has_dependents = true WHERE id IN (SELECT id FROM kiln_jobs"
    " WHERE id = ANY(%s::bigint[]) ORDER BY id FOR NO KEY UPDATE) AND NOT has_dependents"
)


INSERT_EDGES = (
    "INSERT INTO kiln_job_deps (job_id, dep_id) SELECT * FROM unnest(%b::bigint[], %b::bigint[])"
    " ON CONFLICT DO NOTHING"
)


RATE_LIMIT_DECLARE = (
    "INSERT INTO kiln_rate_limits (key, rate, per, burst, tokens, updated_at)"
    " SELECT k, r, p, b, greatest(b, 1), now()"
    " FROM unnest(%s::text[], %s::int[], %s::float8[], %s::int[]) AS u(k, r, p, b)"
    " ON CONFLICT (key) DO UPDATE SET rate = excluded.rate, per = excluded.per,"
    " burst = excluded.burst, changed_at = now() WHERE kiln_rate_limits.rate <> excluded.rate"
    " OR kiln_rate_limits.per <> excluded.per OR kiln_rate_limits.burst <> excluded.burst"
)


def insert_columns(jobs: Sequence[NewJob]) -> list[list[Any]]:
    """The insert's columns, one list each; every value of a column has one type (or
    is None), so compact can compare them without a type check."""
    return [
        [j.queue for j in jobs],
        [j.kind for j in jobs],
        [args_text(j) for j in jobs],
        metadata_texts(jobs),
        [int(j.priority) for j in jobs],
        [None if j.run_at is None else epoch(j.run_at) for j in jobs],
        [float(j.delay) if j.delay > 0 else 0.0 for j in jobs],
        [int(j.max_attempts) for j in jobs],
        [None if j.timeout is None else float(j.timeout) for j in jobs],
        [None if j.backoff is None else dumps(j.backoff) for j in jobs],
        [j.rate_key for j in jobs],
    ]


def metadata_texts(jobs: Sequence[NewJob]) -> list[str]:
    """Each job's metadata as JSON text, encoded once per run of equal values: a batch's
    jobs mostly share theirs (none, or one trace context for the whole batch)."""
    texts: list[str] = []
    last: dict[str, Any] | None = None
    text = "{}"
    for job in jobs:
        metadata = job.metadata
        if not metadata:
            texts.append("{}")
            continue
        if metadata != last:
            text, last = dumps(metadata), metadata
        texts.append(text)
    return texts


# The rows of the keys jobs are put under, held until the commit: a row that holds
# this max already is locked FOR KEY SHARE (no new version: a claim using the row, FOR
# NO KEY UPDATE, is neither blocked nor made to skip it), a missing one is inserted, one
# with another max is given this max. So the pruner (which deletes only rows it locked
# FOR UPDATE, _concurrency.PRUNE_LOCK) cannot delete the row of a key under which this
# transaction puts a job; a row it deleted while this statement waited for the lock is
# not locked (skipped) and is inserted again here.
CONCURRENCY_KEYS_DECLARE = (
    "WITH u AS (SELECT k, m FROM unnest(%s::text[], %s::int[]) AS u(k, m)),"
    " held AS (SELECT c.conc_key FROM kiln_concurrency_keys c JOIN u ON c.conc_key = u.k"
    " AND c.max = u.m ORDER BY c.conc_key FOR KEY SHARE OF c)"
    " INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT k, m FROM u"
    " WHERE k NOT IN (SELECT conc_key FROM held)"
    " ON CONFLICT (conc_key) DO UPDATE SET max = excluded.max"
)


def concurrency_keys_stmt(keys: dict[str, int]) -> Stmt:
    names = sorted(keys)  # one lock order for every caller
    return Stmt(CONCURRENCY_KEYS_DECLARE, (names, [keys[k] for k in names]))


def rate_limit_stmt(limits: dict[str, Any]) -> Stmt:
    keys = sorted(limits)  # one lock order for every caller
    return Stmt(
        RATE_LIMIT_DECLARE,
        (keys, [limits[k].rate for k in keys], [limits[k].per for k in keys],
         [limits[k].burst for k in keys]),
    )


def holds_key(alias: str) -> str:
    """A unique job that holds its key: in a state that counts, as kiln_jobs_unique tests."""
    return (
        f"{alias}.unique_key IS NOT NULL AND ({alias}.unique_states & (CASE {alias}.state"
        " WHEN 'awaiting' THEN 1 WHEN 'pending' THEN 2 WHEN 'scheduled' THEN 4"
        " WHEN 'available' THEN 8 WHEN 'running' THEN 16 WHEN 'completed' THEN 32"
        " WHEN 'failed' THEN 64 ELSE 128 END)) <> 0"
    )
