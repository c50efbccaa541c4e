"""PostgreSQL plans for jobs: insert, claim, results, checkpoints, release and admin ops.

Owns these statements and nothing else; the store runs the plans (see _plan).
Time is always the database's: ``now()`` in SQL, never the process clock.

Dependencies and concurrency: a job is released when it is ``awaiting`` and all its
dependencies are completed. Two transactions completing the two dependencies of one
job must not both miss the release, so a release first locks the candidate
dependents (FOR UPDATE) and checks them in a following statement, whose snapshot sees
whatever the other transaction committed before it let go of the lock. An insert
locks the dependencies it checks for the same reason, and marks them
``has_dependents`` under that lock, so that only their completions pay for the
release (see RESULTS_APPLY).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from kiln._job import (
    JobResult,
    JobRow,
    JobState,
    NewJob,
    Outcome,
)
from kiln._wakeup import CHANNEL, SCHEDULED_PREFIX
from kiln.stores._protocol import ApplyResult, ReleaseResult
from kiln.stores._rows import (
    UniqueSplit,
    args_text,
    attempt_delta,
    dumps,
    epoch,
    errors_from,
    next_state,
    readmitted,
    rescue_step,
)
from kiln.stores.postgres._plan import Plan, Rows, Step, Stmt, atomic, one

COLUMNS = (
    "id", "queue", "kind", "state", "args", "params", "metadata", "priority", "run_at",
    "attempt", "max_attempts", "timeout", "backoff", "errors", "created_at", "admitted_at",
    "attempted_at", "finished_at", "server_id", "rate_key", "rescues", "tags",
)
# JSON columns are read as text and decoded by row_to_job, on every path: a driver-
# decoded value would be ambiguous (args that are the JSON string "{}" would read as {})
_JSON_COLS = ("args", "params", "metadata", "backoff", "errors")
JOB_COLS = ", ".join(f"{c}::text" if c in _JSON_COLS else c for c in COLUMNS)
J_COLS = ", ".join(f"j.{c}::text" if c in _JSON_COLS else f"j.{c}" for c in COLUMNS)
RELEASE_CAP = 10_000  # scheduled jobs released per call; the next call takes the rest


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


_STATES = {s.value: s for s in JobState}
_EMPTY = {"{}", "[]", "null"}  # most params, metadata and errors: no decode needed
# the claim's columns: JSON as text, decoded only when not empty
CLAIM_COLS = JOB_COLS


def _json(value: str | None) -> Any:
    """A JSON column read as text (JOB_COLS); the common empty values without a decode."""
    if value is None:
        return None
    if value in _EMPTY:
        return {} if value == "{}" else [] if value == "[]" else None
    return json.loads(value)


def row_to_job(row: Sequence[Any], depends_on: list[int] | None = None) -> JobRow:
    errors = row[13]
    return JobRow(
        row[0], row[1], row[2], _STATES[row[3]], _json(row[4]), _json(row[5]) or {},
        _json(row[6]) or {}, row[7], row[8], row[9], row[10], row[11], _json(row[12]),
        [] if errors == "[]" or not errors else errors_from(_json(errors)), row[14],
        row[15], row[16], row[17], row[18], row[19], row[20], depends_on or [],
        tags=list(row[21] or ()),
    )


# insert ------------------------------------------------------------------------------
# (name, type) of the insert's columns; all but args are sent as a scalar when every
# job of the batch has the same value, which saves most of the array encoding.
_INSERT_COLS = (
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
def _insert_sql(with_deps: bool, with_tags: bool = False, with_conc: bool = False) -> str:
    """The insert; jobs with tags (or a concurrency key) take a variant that sets them
    (and plain batches keep the statement they had before tags existed)."""
    unmet = (
        "WHEN EXISTS (SELECT 1 FROM kiln_jobs d WHERE d.id = ANY(t.dps)"
        " AND d.state <> 'completed') THEN 'awaiting' "
        if with_deps
        else ""
    )
    cols = list(_INSERT_COLS)
    cols += [("dp", "text")] if with_deps else []
    cols += [("tg", "text")] if with_tags else []
    cols += [("ck", "text")] if with_conc else []
    picked = ", ".join(
        f"u.{n}" if n == "a" else f"coalesce(u.{n}, %b::{t}) AS {n}" for n, t in cols
    )
    arrays = ", ".join(f"%b::{t}[]" for _, t in cols)
    names = ", ".join(n for n, _ in cols)
    dp = ", t.dp::bigint[] AS dps" if with_deps else ""
    tag_col, tag_value = (", tags", ", coalesce(t.tg::text[], '{}')") if with_tags else ("", "")
    if with_conc:
        tag_col, tag_value = tag_col + ", conc_key", tag_value + ", t.ck"
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


def _compact(cols: list[list[Any]]) -> list[Any]:
    """Scalars then arrays, as _insert_sql expects: a column whose values are all
    equal is sent as that scalar and an empty array (unnest pads it with NULLs)."""
    scalars: list[Any] = []
    arrays: list[Any] = []
    for (name, _), col in zip(_INSERT_COLS, cols, strict=False):
        first = col[0]
        # count() compares in C; each column holds one type (see _columns), but for
        # None, which count tells apart from every value
        if name != "a" and col.count(first) == len(col):
            scalars.append(first)
            arrays.append([])
        else:
            if name != "a":
                scalars.append(None)
            arrays.append(col)
    for extra in cols[len(_INSERT_COLS):]:  # dependencies: always per job
        scalars.append(None)
        arrays.append(extra)
    return [*scalars, *arrays]


INSERT_FAST = _insert_sql(with_deps=False)
INSERT_DEPS = _insert_sql(with_deps=True)
INSERT_TAGGED = {deps: _insert_sql(with_deps=deps, with_tags=True) for deps in (False, True)}
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
    " burst = excluded.burst WHERE kiln_rate_limits.rate <> excluded.rate"
    " OR kiln_rate_limits.per <> excluded.per OR kiln_rate_limits.burst <> excluded.burst"
)


def _columns(jobs: Sequence[NewJob]) -> list[list[Any]]:
    """The insert's columns, one list each; every value of a column has one type (or
    is None), so _compact can compare them without a type check."""
    return [
        [j.queue for j in jobs],
        [j.kind for j in jobs],
        [args_text(j) for j in jobs],
        _metadata_texts(jobs),
        [int(j.priority) for j in jobs],
        [None if j.run_at is None else epoch(j.run_at) for j in jobs],
        [float(j.delay) if j.delay > 0 else 0.0 for j in jobs],
        [int(j.max_attempts) for j in jobs],
        [None if j.timeout is None else float(j.timeout) for j in jobs],
        [None if j.backoff is None else dumps(j.backoff) for j in jobs],
        [j.rate_key for j in jobs],
    ]


def _metadata_texts(jobs: Sequence[NewJob]) -> list[str]:
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


# a key's row, or its new max; a key whose row holds this max already is left alone, so
# an insert never locks a row a claim is using (ON CONFLICT DO UPDATE would lock it)
CONCURRENCY_KEYS_DECLARE = (
    "INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT k, m"
    " FROM unnest(%s::text[], %s::int[]) AS u(k, m) WHERE NOT EXISTS (SELECT 1 FROM"
    " kiln_concurrency_keys c WHERE c.conc_key = u.k AND c.max = u.m)"
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


def insert(jobs: Sequence[NewJob]) -> Plan[list[int]]:
    """Insert ``jobs`` in one statement (two with dependencies); ids in input order.
    Unique jobs take their own statement (see _unique), and come back as EnqueueResults."""
    if not jobs:
        return []
    if any(j.unique_key is not None for j in jobs):
        from kiln.stores.postgres import _unique  # it imports this module

        split = UniqueSplit.of(jobs)
        plain = (yield from insert([jobs[i] for i in split.plain])) if split.plain else []
        unique = yield from _unique.insert([jobs[i] for i in split.unique])
        return split.merge(plain, unique)
    cols = _columns(jobs)
    limits = {j.rate_key: j.rate_limit for j in jobs if j.rate_key and j.rate_limit}
    deps = sorted({d for j in jobs for d in j.depends_on})
    tagged = any(j.tags for j in jobs)
    keys = {j.conc_key: j.conc_max for j in jobs if j.conc_key is not None}
    if not deps and not limits and not tagged and not keys:
        rows = (yield one(INSERT_FAST, *_compact(cols), prepare=True))[0]
        return sorted(r[0] for r in rows)
    pre: list[Stmt] = []
    if limits:
        pre.append(rate_limit_stmt(limits))
    if keys:
        pre.append(concurrency_keys_stmt(keys))
    if deps:
        pre.append(Stmt(MARK_DEPS, (deps,)))
        cols.append(["{" + ",".join(str(int(x)) for x in j.depends_on) + "}" for j in jobs])
    if tagged:
        cols.append([text_array(j.tags) for j in jobs])
    if keys:
        cols.append([j.conc_key for j in jobs])
    ins = Stmt(_insert_sql(bool(deps), tagged, bool(keys)), tuple(_compact(cols)))
    results = yield Step((*pre, ins), last=not deps)
    ids = sorted(r[0] for r in results[-1])
    if deps:
        edges = [(i, dep) for i, job in zip(ids, jobs, strict=True) for dep in job.depends_on]
        yield one(INSERT_EDGES, [e[0] for e in edges], [e[1] for e in edges])
    return ids


# claim, results, checkpoints, release ------------------------------------------------
# a job the plain claim may take: no concurrency key (those go through _concurrency,
# under their key's lock), in a queue without a limit of its own; kiln_jobs_claim holds
# the plain available jobs only, so the limited jobs waiting in the queue are not read
PLAIN = (
    "conc_key IS NULL AND NOT EXISTS (SELECT 1 FROM kiln_concurrency_keys c"
    " WHERE c.conc_key = 'queue:' || kiln_jobs.queue)"
)
# The plain claim walks kiln_jobs_claim (queue, kind, priority, run_at, id) once per kind
# it asks for (a LATERAL walk that locks at most `limit` jobs of that kind, skipping
# locked ones), then takes the first `limit` of them all by priority, run_at, id: the
# order of one walk over the queue, without reading another service's kinds that share
# it (migration 0011). The jobs of a kind locked but not taken are unlocked at the
# statement's commit. The pause and the queue-limit checks run once per claim, before
# any walk (a, kept a subquery of its own by OFFSET 0), so a paused queue locks nothing.
# The limit is passed twice (the walks' and the merge's, the latter through a subquery:
# as a bare parameter it made the custom plans look cheaper than the generic one, and
# with table statistics PostgreSQL planned every claim). The ids come as an array, so
# the update finds its rows by primary key whatever the estimate of the walks' rows.
CLAIM = (
    "UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1, attempted_at = now(),"
    " server_id = %s WHERE id = ANY(ARRAY(SELECT c.id FROM (SELECT * FROM"
    " (SELECT %s::text AS queue, %s::text[] AS kinds, %s::int AS n) AS a0"
    " WHERE NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p WHERE p.queue IN (a0.queue, '*'))"
    " AND NOT EXISTS (SELECT 1 FROM kiln_concurrency_keys q"
    " WHERE q.conc_key = 'queue:' || a0.queue) OFFSET 0) AS a"
    " CROSS JOIN LATERAL (SELECT DISTINCT unnest(a.kinds) AS kind) AS k"
    " CROSS JOIN LATERAL (SELECT id, priority, run_at FROM kiln_jobs"
    " WHERE state = 'available' AND conc_key IS NULL AND queue = a.queue AND kind = k.kind"
    " ORDER BY priority, run_at, id LIMIT a.n FOR UPDATE SKIP LOCKED) AS c"
    f" ORDER BY c.priority, c.run_at, c.id LIMIT (SELECT %s::int OFFSET 0))) RETURNING {CLAIM_COLS}"
)


def claim_stmt(queue: str, kinds: list[str], limit: int, server_id: str) -> Stmt:
    return Stmt(CLAIM, (server_id, queue, kinds, limit, limit), prepare=True, binary=True)


# the same claim, prepared on the LISTEN connection and run with libpq's own calls
# (_claimer), with claim_stmt's parameters: $1 server_id, $2 queue, $3 kinds, $4 limit,
# $5 limit
CLAIM_PREPARED = "kiln_claim"


def _numbered(sql: str) -> str:
    """psycopg's %s placeholders as PostgreSQL's $1, $2, ..."""
    first, *rest = sql.split("%s")
    return first + "".join(f"${i}{part}" for i, part in enumerate(rest, 1))


CLAIM_PREPARE = (
    f"PREPARE {CLAIM_PREPARED} (text, text, text[], int, int) AS {_numbered(CLAIM)}"
)


def claimed(rows: Rows) -> list[JobRow]:
    jobs = [row_to_job(r) for r in rows]
    jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
    return jobs


def claim(queue: str, kinds: list[str], limit: int, server_id: str) -> Plan[list[JobRow]]:
    """One round trip: lock the first ``limit`` claimable jobs, skipping locked ones."""
    if not kinds or limit <= 0:
        return []
    rows = (yield Step((claim_stmt(queue, kinds, limit, server_id),), last=True))[0]
    return claimed(rows)


# A completion releases the job's dependents, which needs a lock-then-check in a
# transaction (module docstring). Most jobs have none: the first statement applies
# every result except the completion of a job with dependents (has_dependents, set
# under the job's row lock when a dependent is inserted, so a completion racing that
# insert re-reads it), as its own transaction. Completions it held back, if any, go
# through the full path in a second trip: apply, lock dependents, release, one
# transaction. The plan must find each job by its primary key: through the index on
# state it walks every running entry, dead ones included (until a vacuum), for each
# batch. 'running' and the batch's arrays are read through a subquery the planner does
# not flatten (prm), so no plan sees their values: with table statistics taken while
# few jobs ran, a plan that saw 'running' estimated one row there, chose that index and
# was planned anew for every batch (0.5 to 0.8 ms; it never went generic).
def _results_apply_sql(with_results: bool) -> str:
    """RESULTS_APPLY, or with stored results: one more array, the results' JSON text,
    written where it is not NULL. Batches without any (results of None, the common
    case) run the statement without it, so they pay nothing for results."""
    res_col = ", res" if with_results else ""
    res_set = (" result = CASE WHEN r.res IS NULL THEN j.result ELSE r.res::jsonb END,"
               if with_results else "")
    res_prm = ", %b::text[] AS res" if with_results else ""
    res_arg = ", prm.res" if with_results else ""
    return (
        "WITH r AS (SELECT r.*, prm.running, prm.deps FROM (SELECT %b::bigint[] AS ids,"
        " %b::text[] AS servers, %b::int[] AS attempts, %b::text[] AS states,"
        " %b::int[] AS deltas, %b::float8[] AS delays, %b::text[] AS errors,"
        f" %b::int[] AS rescues, %b::bool[] AS readmits{res_prm},"
        " %b::text AS running, %b::bool AS deps OFFSET 0) AS prm"
        " CROSS JOIN LATERAL unnest(prm.ids, prm.servers, prm.attempts, prm.states,"
        f" prm.deltas, prm.delays, prm.errors, prm.rescues, prm.readmits{res_arg})"
        f" AS r(id, server_id, attempt, state, delta, delay, error, rescue, readmit{res_col})),"
        " upd AS (UPDATE kiln_jobs j SET state = CASE WHEN r.readmit AND j.rate_key IS NOT NULL"
        "  THEN 'pending' ELSE r.state END, attempt = j.attempt + r.delta,"
        " run_at = CASE WHEN r.state IN ('scheduled', 'available')"
        "  THEN now() + r.delay * interval '1 second' ELSE j.run_at END,"
        " finished_at = CASE WHEN r.state IN ('completed', 'failed', 'cancelled') THEN now() END,"
        " rescues = CASE r.rescue WHEN 1 THEN j.rescues + 1 WHEN 0 THEN j.rescues ELSE 0 END,"
        f"{res_set}"
        " errors = CASE WHEN r.error IS NULL THEN j.errors"
        "  ELSE j.errors || jsonb_build_array(r.error::jsonb) END,"
        " server_id = CASE WHEN r.state IN ('completed', 'failed', 'cancelled')"
        "  THEN j.server_id END"
        " FROM r WHERE j.id = r.id AND j.state = r.running AND j.server_id = r.server_id"
        " AND j.attempt = r.attempt AND (r.deps OR r.state <> 'completed'"
        "  OR NOT j.has_dependents)"
        " RETURNING j.id, j.queue, j.state, j.run_at)"
        f"{notify_from('upd')} SELECT id, queue, state FROM upd WHERE {NOTIFIED}"
    )


RESULTS_APPLY = _results_apply_sql(with_results=False)
RESULTS_APPLY_STORED = _results_apply_sql(with_results=True)

LOCK_DEPENDENTS = (
    "SELECT j.id FROM kiln_jobs j WHERE j.state = 'awaiting' AND j.id IN"
    " (SELECT job_id FROM kiln_job_deps WHERE dep_id = ANY(%s::bigint[]))"
    " ORDER BY j.id FOR UPDATE"
)
RELEASE_DEPENDENTS = (
    "WITH rel AS (UPDATE kiln_jobs j SET state = CASE WHEN j.rate_key IS NOT NULL"
    " THEN 'pending' WHEN j.run_at > now() THEN 'scheduled' ELSE 'available' END,"
    " run_at = greatest(j.run_at, now())"
    " WHERE j.state = 'awaiting' AND j.id IN"
    " (SELECT job_id FROM kiln_job_deps WHERE dep_id = ANY(%s::bigint[]))"
    " AND NOT EXISTS (SELECT 1 FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
    "  WHERE d.job_id = j.id AND o.state <> 'completed')"
    " RETURNING j.queue, j.state, j.run_at)"
    f"{notify_from('rel')} SELECT queue, count(*) FROM rel"
    f" WHERE state = 'available' AND {NOTIFIED} GROUP BY queue"
)


def release_stmts(dep_ids: list[int]) -> tuple[Stmt, Stmt]:
    """Lock, then release, the awaiting dependents of ``dep_ids`` (see module docstring)."""
    return Stmt(LOCK_DEPENDENTS, (dep_ids,)), Stmt(RELEASE_DEPENDENTS, (dep_ids,))


def counted(rows: Rows) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in rows}


def _results_stmt(ordered: Sequence[JobResult], with_dependents: bool) -> Stmt:
    cols: list[Any] = [[], [], [], [], [], [], [], [], []]
    ids, servers, attempts, states, deltas, delays, errors, rescue, readmit = cols
    for r in ordered:
        ids.append(r.job_id)
        servers.append(r.server_id)
        attempts.append(r.attempt)
        states.append(next_state(r).value)
        deltas.append(attempt_delta(r))
        delays.append(float(max(r.run_at_delay, 0.0)))
        errors.append(None if r.error is None else dumps(r.error.to_json()))
        rescue.append(rescue_step(r))
        readmit.append(readmitted(r))
    if any(r.result is not None for r in ordered):
        cols.append([r.result for r in ordered])
        return Stmt(RESULTS_APPLY_STORED, (*cols, "running", with_dependents), prepare=True)
    return Stmt(RESULTS_APPLY, (*cols, "running", with_dependents), prepare=True)


def _released(rows: Rows, released: dict[str, int]) -> None:
    for _id, queue, state in rows:
        if state == "available":
            released[queue] = released.get(queue, 0) + 1


def results_apply(results: Sequence[JobResult]) -> Plan[ApplyResult]:
    """One statement in the common case; see RESULTS_APPLY for the second trip."""
    if not results:
        return ApplyResult(applied=0, released={})
    ordered = sorted(results, key=lambda r: r.job_id)  # one lock order
    rows = (yield Step((_results_stmt(ordered, False),), last=True))[0]
    released: dict[str, int] = {}
    _released(rows, released)
    done = {int(r[0]) for r in rows}
    held = [r for r in ordered if r.outcome is Outcome.COMPLETED and r.job_id not in done]
    if held:  # completions of jobs with dependents (or fenced results: they apply nothing)
        held_ids = [r.job_id for r in held]
        out = yield atomic(_results_stmt(held, True), *release_stmts(held_ids))
        _released(out[0], released)
        done.update(int(r[0]) for r in out[0])
        for queue, n in counted(out[2]).items():
            released[queue] = released.get(queue, 0) + n
    return ApplyResult(applied=len(done), released=released, applied_ids=frozenset(done))


ATTEMPTS_END = (
    "UPDATE kiln_jobs j SET attempt_running = false FROM unnest(%s::bigint[], %s::text[],"
    " %s::int[]) AS r(id, server_id, attempt) WHERE j.id = r.id AND j.attempt_running"
    " AND j.state = 'cancelled' AND j.server_id = r.server_id AND j.attempt = r.attempt"
    " RETURNING j.id"
)


def attempts_end(results: Sequence[JobResult]) -> Plan[int]:
    """The fenced-off results of jobs cancelled while running end those attempts."""
    rows = (yield one(ATTEMPTS_END, [r.job_id for r in results],
                      [r.server_id for r in results], [r.attempt for r in results]))[0]
    return len(rows)


PARAM_SET = (
    "UPDATE kiln_jobs SET params = jsonb_set(params, ARRAY[%s::text], %s::jsonb)"
    " WHERE id = %s AND state = 'running' AND server_id = %s AND attempt = %s RETURNING 1"
)


def param_set(job_id: int, server_id: str, attempt: int, name: str, value: Any) -> Plan[bool]:
    rows = (yield one(PARAM_SET, name, dumps(value), job_id, server_id, attempt))[0]
    return bool(rows)


RELEASE_DUE = (
    "WITH rel AS (UPDATE kiln_jobs SET state = 'available' WHERE id IN"
    " (SELECT id FROM kiln_jobs WHERE state = 'scheduled' AND run_at <= now()"
    f" ORDER BY run_at LIMIT {RELEASE_CAP} FOR UPDATE SKIP LOCKED)"
    " RETURNING queue, state, run_at)"
    f"{notify_from('rel')} SELECT queue, count(*), NULL::float8 FROM rel"
    f" WHERE {NOTIFIED} GROUP BY queue"
    " UNION ALL SELECT NULL, NULL, extract(epoch FROM min(run_at) - now())::float8"
    " FROM kiln_jobs WHERE state = 'scheduled' AND run_at > now()"
)


def release_due() -> Plan[ReleaseResult]:
    rows = (yield one(RELEASE_DUE, prepare=True))[0]
    released = {str(r[0]): int(r[1]) for r in rows if r[0] is not None}
    nxt = next((r[2] for r in rows if r[0] is None), None)
    if sum(released.values()) >= RELEASE_CAP:
        nxt = 0.0
    return ReleaseResult(released=released, next_at=None if nxt is None else max(nxt, 0.0))


def holds_key(alias: str) -> str:
    """A unique job that holds its key: in a state that counts, as kiln_jobs_unique tests."""
    return (
        f"{alias}.unique_key IS NOT NULL AND ({alias}.unique_states & (CASE {alias}.state"
        " WHEN 'awaiting' THEN 1 WHEN 'pending' THEN 2 WHEN 'scheduled' THEN 4"
        " WHEN 'available' THEN 8 WHEN 'running' THEN 16 WHEN 'completed' THEN 32"
        " WHEN 'failed' THEN 64 ELSE 128 END)) <> 0"
    )


# a requeue leaves a unique job whose key another job holds where it is
NOT_HELD = (
    "(unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM kiln_jobs o"
    f" WHERE o.unique_key = kiln_jobs.unique_key AND o.id <> kiln_jobs.id AND {holds_key('o')}))"
)

