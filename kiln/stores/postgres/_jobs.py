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

import json
from collections.abc import Sequence
from typing import Any

from kiln._model._job import (
    JobResult,
    JobRow,
    JobState,
    NewJob,
    Outcome,
)
from kiln.stores._protocol import ApplyResult, ReleaseResult
from kiln.stores._rows import (
    RAN_UNIQUE,
    UniqueSplit,
    attempt_delta,
    claim_token,
    dumps,
    errors_from,
    levels,
    next_state,
    readmitted,
    rescue_step,
    resolved,
)
from kiln.stores.postgres import _unique
from kiln.stores.postgres._insert import (
    INSERT_EDGES,
    INSERT_FAST,
    INSERT_FAST_QUIET,
    INSERT_ONE,
    INSERT_ONE_QUIET,
    MARK_DEPS,
    NOTIFIED,
    compact,
    concurrency_keys_stmt,
    holds_key,
    insert_columns,
    insert_sql,
    notify_from,
    one_row,
    rate_limit_stmt,
    text_array,
)
from kiln.stores.postgres._plan import Plan, Rows, Step, Stmt, atomic, one

COLUMNS = (
    "id", "queue", "kind", "state", "args", "params", "metadata", "priority", "run_at",
    "attempt", "max_attempts", "timeout", "backoff", "errors", "created_at", "admitted_at",
    "attempted_at", "finished_at", "server_id", "rate_key", "rescues", "tags", "conc_key",
)
# JSON columns are read as text and decoded by row_to_job, on every path: a driver-
# decoded value would be ambiguous (args that are the JSON string "{}" would read as {})
_JSON_COLS = ("args", "params", "metadata", "backoff", "errors")
JOB_COLS = ", ".join(f"{c}::text" if c in _JSON_COLS else c for c in COLUMNS)
J_COLS = ", ".join(f"j.{c}::text" if c in _JSON_COLS else f"j.{c}" for c in COLUMNS)
RELEASE_CAP = 10_000  # scheduled jobs released per call; the next call takes the rest


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
        tags=list(row[21] or ()), conc_key=row[22],
    )


def insert(
    jobs: Sequence[NewJob], *, alone: bool = True, quiet: bool = False
) -> Plan[list[int]]:
    """Insert ``jobs``, all or none: ids in input order (unique jobs' as EnqueueResults).

    One transaction whatever the batch holds (the store's runner frames a plan whose
    first step is not its last); ``alone`` False: the plan is part of a larger one
    (a recurring job's), whose runner commits at its end. A batch of one single
    statement runs without BEGIN/COMMIT, atomic by itself. Unique jobs take their own
    statement (see _unique), after the plain ones and in the same transaction."""
    if not jobs:
        return []
    if any(j.after for j in jobs):
        return (yield from _insert_levels(jobs))
    if any(j.unique_key is not None for j in jobs):
        return (yield from _insert_mixed(jobs, alone))
    return (yield from _insert_plain(jobs, last=alone, quiet=quiet))


def _insert_mixed(jobs: Sequence[NewJob], alone: bool) -> Plan[list[int]]:
    """Plain and unique jobs: the rate limits of all first (one lock order), then the
    plain jobs, then the unique ones; no step commits before the last."""
    split = UniqueSplit.of(jobs)
    unique_jobs = [jobs[i] for i in split.unique]
    if alone and not split.plain and len(unique_jobs) == 1:
        # one job: its statement (or first round) is the call's only write
        return split.merge([], (yield from _unique.insert(unique_jobs, alone=True)))
    limits = {j.rate_key: j.rate_limit for j in jobs if j.rate_key and j.rate_limit}
    if limits:
        yield Step((rate_limit_stmt(limits),))
    plain: list[int] = []
    if split.plain:
        plain = yield from _insert_plain([jobs[i] for i in split.plain], last=False,
                                         declared=True)
    unique = yield from _unique.insert(unique_jobs, alone=False, declared=True)
    return split.merge(plain, unique)


def _insert_levels(jobs: Sequence[NewJob]) -> Plan[list[int]]:
    """Jobs that depend on earlier jobs of the batch (``NewJob.after``): level by level,
    each level's ids resolving the next one's dependencies, in one transaction."""
    ids: list[int] = [0] * len(jobs)
    for level in levels(jobs):
        got = yield from insert([resolved(jobs[i], ids) for i in level], alone=False)
        for i, job_id in zip(level, got, strict=True):
            ids[i] = job_id
    return ids


def _insert_plain(
    jobs: Sequence[NewJob], *, last: bool, declared: bool = False, quiet: bool = False
) -> Plan[list[int]]:
    """Jobs without unique keys in one statement (two with dependencies); ``last``: the
    plan ends with it, so COMMIT can ride in its trip. ``declared``: the batch's rate
    limits were declared already. ``quiet``: the plain statement sends no NOTIFY (the
    notify limiter sent one for the queue a moment ago; PostgresStore decides)."""
    if len(jobs) == 1:
        job = jobs[0]
        if (not job.depends_on and not job.tags and job.conc_key is None
                and not job.defaulted and (declared or not (job.rate_key and job.rate_limit))):
            sql = INSERT_ONE_QUIET if quiet else INSERT_ONE
            rows = (yield Step((Stmt(sql, one_row(job), prepare=True),), last=last))[0]
            return [rows[0][0]]
    cols = insert_columns(jobs)
    limits = {} if declared else {
        j.rate_key: j.rate_limit for j in jobs if j.rate_key and j.rate_limit
    }
    deps = sorted({d for j in jobs for d in j.depends_on})
    tagged = any(j.tags for j in jobs)
    keys = {j.conc_key: j.conc_max for j in jobs if j.conc_key is not None}
    undeclared = any(j.defaulted for j in jobs)
    if not deps and not limits and not tagged and not keys and not undeclared:
        sql = INSERT_FAST_QUIET if quiet else INSERT_FAST
        rows = (yield Step((Stmt(sql, tuple(compact(cols)), prepare=True),), last=last))[0]
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
    if undeclared:
        cols.append([j.defaulted for j in jobs])
    ins = Stmt(insert_sql(bool(deps), tagged, bool(keys), undeclared), tuple(compact(cols)))
    results = yield Step((*pre, ins), last=last and not deps)
    ids = sorted(r[0] for r in results[-1])
    if deps:
        edges = [(i, dep) for i, job in zip(ids, jobs, strict=True) for dep in job.depends_on]
        yield Step((Stmt(INSERT_EDGES, ([e[0] for e in edges], [e[1] for e in edges])),),
                   last=last)
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
    f" {RAN_UNIQUE},"
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
        f" %b::int[] AS rescues, %b::bool[] AS readmits, %b::timestamptz[] AS claims{res_prm},"
        " %b::text AS running, %b::bool AS deps OFFSET 0) AS prm"
        " CROSS JOIN LATERAL unnest(prm.ids, prm.servers, prm.attempts, prm.states,"
        f" prm.deltas, prm.delays, prm.errors, prm.rescues, prm.readmits, prm.claims{res_arg})"
        f" AS r(id, server_id, attempt, state, delta, delay, error, rescue, readmit, claimed"
        f"{res_col})),"
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
        " AND j.attempt = r.attempt AND (r.claimed IS NULL OR j.attempted_at = r.claimed)"
        " AND (r.deps OR r.state <> 'completed'"
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
    cols: list[Any] = [[], [], [], [], [], [], [], [], [], []]
    ids, servers, attempts, states, deltas, delays, errors, rescue, readmit, claims = cols
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
        claims.append(claim_token(r))
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


# the due ids as an array (an InitPlan), which the primary key answers: with ``id IN
# (SELECT ...)`` the planner, expecting up to RELEASE_CAP rows, hash-joined them to a
# sequential scan of the whole table (tests/stores/test_postgres_release_plans.py)
RELEASE_DUE = (
    "WITH rel AS (UPDATE kiln_jobs SET state = 'available' WHERE id = ANY(ARRAY("
    "SELECT id FROM kiln_jobs WHERE state = 'scheduled' AND run_at <= now()"
    f" ORDER BY run_at LIMIT {RELEASE_CAP} FOR UPDATE SKIP LOCKED))"
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


# a requeue leaves a unique job whose key another job holds where it is
NOT_HELD = (
    "(unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM kiln_jobs o"
    f" WHERE o.unique_key = kiln_jobs.unique_key AND o.id <> kiln_jobs.id AND {holds_key('o')}))"
)

