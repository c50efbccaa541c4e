"""MySQL/MariaDB plans for jobs: insert, claim, results, checkpoints and release.

Owns these statements and nothing else; the store runs the plans (see _plan).
Time is always the database's: ``UTC_TIMESTAMP(6)`` in SQL, never the process clock.
MySQL evaluates it once per statement, so every use inside one statement agrees, and a
later statement of the same round trip reads a later time.

Dependencies and concurrency: a job is released when it is ``awaiting`` and all its
dependencies are completed. Two transactions completing the two dependencies of one
job must not both miss the release, so a release first locks the candidate
dependents (FOR UPDATE) and checks them in a following statement which, at READ
COMMITTED, sees whatever the other transaction committed before it let go of the
lock. An insert marks the dependencies it checks ``has_dependents`` (which locks them)
and reads their states with a locking read (the latest committed version, whatever the
isolation of a caller's transaction), for the same reason.

A result batch commits in the round trip that writes it: completions are written only
where ``has_dependents`` is false, so they have nothing to release. A completion that
matched nothing there (its job has dependents, or it was fenced) is written again in a
second transaction that locks, checks and releases its dependents.

MariaDB has no UPDATE ... RETURNING, so writes that must report rows lock and read them
first, then update them by primary key in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kiln._model._job import JobResult, JobRow, JobState, NewJob, Outcome
from kiln.stores._protocol import ApplyResult, ReleaseResult
from kiln.stores._rows import (
    RAN_UNIQUE,
    RESCUE_ADD,
    RESCUE_KEEP,
    UniqueSplit,
    attempt_delta,
    claim_token,
    dumps,
    levels,
    next_state,
    readmitted,
    rescue_step,
    resolved,
)
from kiln.stores.mysql import _unique
from kiln.stores.mysql._columns import (
    FINISHED,
    INSERT,
    JOB_COLS,
    NOW,
    UNLIMITED,
    UNPAUSED,
    VALUES,
    insert_values,
    rate_limit_stmt,
    row_to_job,
)
from kiln.stores.mysql._concurrency import declare_stmts
from kiln.stores.mysql._plan import (
    Plan,
    Result,
    Step,
    Stmt,
    from_db_required,
    marks,
    micros,
    one,
    step,
    to_db,
)

RELEASE_CAP = 10_000  # scheduled jobs released per call; the next call takes the rest


def insert(jobs: Sequence[NewJob], returning: bool, *, alone: bool = True) -> Plan[list[int]]:
    """Insert ``jobs``, all or none; ids in input order (unique jobs' as EnqueueResults).
    ``returning``: the server has INSERT ... RETURNING (MariaDB), so a batch is one
    statement; MySQL 8 inserts row by row and reads each LAST_INSERT_ID, since its
    interleaved auto-increment mode does not promise consecutive ids within a multi-row
    insert. One transaction whatever the batch holds; ``alone`` False: the plan is part
    of a larger transaction (a recurring job's), which commits at its end."""
    if not jobs:
        return []
    if any(j.after for j in jobs):
        return (yield from _insert_levels(jobs, returning))
    if any(j.unique_key is not None for j in jobs):
        return (yield from _insert_mixed(jobs, returning, alone))
    return (yield from _insert_plain(jobs, returning, last=alone))


def _insert_mixed(jobs: Sequence[NewJob], returning: bool, alone: bool) -> Plan[list[int]]:
    """Plain and unique jobs: the rate limits of all first (one lock order), then the
    plain jobs, then the unique ones, in one transaction."""
    split = UniqueSplit.of(jobs)
    unique_jobs = [jobs[i] for i in split.unique]
    if alone and not split.plain and len(unique_jobs) == 1:
        return split.merge([], (yield from _unique.insert(unique_jobs, alone=True)))
    limits = {j.rate_key: j.rate_limit for j in jobs if j.rate_key and j.rate_limit}
    if limits:
        yield step(rate_limit_stmt(limits), begin=True)
    plain: list[int] = []
    if split.plain:
        plain = yield from _insert_plain([jobs[i] for i in split.plain], returning,
                                         last=False, declared=True)
    unique = yield from _unique.insert(unique_jobs, alone=False, declared=True)
    return split.merge(plain, unique)


def _insert_levels(jobs: Sequence[NewJob], returning: bool) -> Plan[list[int]]:
    """Jobs that depend on earlier jobs of the batch (``NewJob.after``): level by level,
    each level's ids resolving the next one's dependencies, in one transaction."""
    ids: list[int] = [0] * len(jobs)
    for level in levels(jobs):
        got = yield from insert([resolved(jobs[i], ids) for i in level], returning,
                                alone=False)
        for i, job_id in zip(level, got, strict=True):
            ids[i] = job_id
    return ids


def _insert_plain(
    jobs: Sequence[NewJob], returning: bool, *, last: bool, declared: bool = False
) -> Plan[list[int]]:
    """Jobs without unique keys; ``last``: the plan ends with them (else every step
    opens, or stays in, the plan's transaction). ``declared``: the batch's rate limits
    were declared already."""
    limits = {} if declared else {
        j.rate_key: j.rate_limit for j in jobs if j.rate_key and j.rate_limit
    }
    deps = sorted({int(d) for j in jobs for d in j.depends_on})
    pre: list[Stmt] = []
    if limits:
        pre.append(rate_limit_stmt(limits))
    keys = {j.conc_key: j.conc_max for j in jobs if j.conc_key is not None}
    if keys:
        pre.extend(declare_stmts(keys))
    if deps:
        m = marks(len(deps))
        pre.append(Stmt(
            f"UPDATE kiln_jobs SET has_dependents = TRUE WHERE id IN ({m}) ORDER BY id", deps
        ))
        pre.append(Stmt(
            f"SELECT id FROM kiln_jobs WHERE id IN ({m}) AND state <> 'completed'"
            " LOCK IN SHARE MODE", deps,
        ))
    unmet: set[int] = set()
    if pre:
        out = yield step(*pre, begin=True)
        if deps:
            unmet = {int(r[0]) for r in out[-1].rows}
    values = [insert_values(j, any(int(d) in unmet for d in j.depends_on)) for j in jobs]
    if returning:
        sql = INSERT + ", ".join([VALUES] * len(jobs)) + " RETURNING id"
        ins: tuple[Stmt, ...] = (Stmt(sql, [p for v in values for p in v]),)
    else:
        ins = tuple(Stmt(INSERT + VALUES, v) for v in values)
    out = yield Step(ins, begin=bool(pre) or len(ins) > 1 or not last, last=last and not deps)
    ids = [int(r[0]) for r in out[0].rows] if returning else [int(r.lastrowid or 0) for r in out]
    edges = [(i, int(d)) for i, job in zip(ids, jobs, strict=True) for d in job.depends_on]
    if edges:
        yield step(Stmt(
            "INSERT INTO kiln_job_deps (job_id, dep_id) VALUES "
            + ", ".join(["(%s, %s)"] * len(edges))
            + " ON DUPLICATE KEY UPDATE dep_id = dep_id",
            [x for e in edges for x in e],
        ), begin=True, last=last)
    return ids


# The queue's own range of kiln_jobs_claim (state, queue, conc_key, priority, run_at,
# id), in claim order. Left to itself, MariaDB took kiln_jobs_conc (state, conc_key,
# ...): every queue's available jobs in claim order, filtered to this one, so a queue
# being drained walked past the other queues' older jobs, more at every claim (6 s a
# claim with 3,000,000 waiting over 20 queues; tests/stores/test_mysql_claim_plan.py).
CLAIM_FROM = "kiln_jobs FORCE INDEX (kiln_jobs_claim)"


def claim(
    queue: str, kinds: Sequence[str], limit: int, server_id: str, probe: bool
) -> Plan[list[JobRow]]:
    """Lock up to ``limit`` available jobs skipping locked ones, then mark them running:
    two round trips. ``probe``: the queue looked empty last time, so first ask (without
    a transaction, one statement) whether anything is there at all."""
    if not kinds or limit <= 0:
        return []
    where = (f"state = 'available' AND queue = %s AND conc_key IS NULL"
             f" AND kind IN ({marks(len(kinds))})")
    if probe:
        found = yield one(f"SELECT 1 FROM {CLAIM_FROM} WHERE {where} LIMIT 1", queue, *kinds)
        if not found[0].rows:
            return []
    out = yield step(
        Stmt(
            f"SELECT {JOB_COLS}, {NOW} FROM {CLAIM_FROM} WHERE {where} AND {UNPAUSED}"
            f" AND {UNLIMITED}"
            " ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED",
            (queue, *kinds, limit),
        ),
        begin=True,
    )
    rows = out[0].rows
    if not rows:
        return []
    now: datetime = rows[0][-1]
    ids = [r[0] for r in rows]
    yield step(
        Stmt(
            "UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1, attempted_at = %s,"
            f" {RAN_UNIQUE},"
            f" server_id = %s WHERE id IN ({marks(len(ids))})",
            (now, server_id, *ids),
        ),
        last=True,
    )
    jobs = []
    for r in rows:
        job = row_to_job(r[:-1])
        job.state = JobState.RUNNING
        job.attempt += 1
        job.attempted_at = from_db_required(now)
        job.server_id = server_id
        jobs.append(job)
    return jobs


# results -----------------------------------------------------------------------------
def _result_stmt(r: JobResult, guarded: bool) -> Stmt:
    state = next_state(r)
    # a rate-limited job's next attempt starts once admitted (_rows.readmitted)
    first = "state = IF(rate_key IS NULL, %s, 'pending')" if readmitted(r) else "state = %s"
    sets = [first, "attempt = attempt + %s"]
    params: list[Any] = [state.value, attempt_delta(r)]
    if state in (JobState.SCHEDULED, JobState.AVAILABLE):
        sets.append(f"run_at = {NOW} + INTERVAL %s MICROSECOND")
        params.append(micros(max(r.run_at_delay, 0.0)))
    if state.value in FINISHED:
        sets.append(f"finished_at = {NOW}")
    else:
        sets.append("finished_at = NULL")
        sets.append("server_id = NULL")  # the claimer stays on a finished job only
    rescue = rescue_step(r)
    if rescue != RESCUE_KEEP:
        sets.append("rescues = rescues + 1" if rescue == RESCUE_ADD else "rescues = 0")
    if r.error is not None:
        sets.append("errors = JSON_ARRAY_APPEND(errors, '$', JSON_EXTRACT(%s, '$'))")
        params.append(dumps(r.error.to_json()))
    if r.result is not None:  # a stored result (kiln._model._results), JSON text
        sets.append("result = %s")
        params.append(r.result)
    # the fence is evaluated on the row before any SET: MySQL applies SETs left to right
    # but WHERE sees the old row
    guard = " AND has_dependents = FALSE" if guarded else ""
    fence: tuple[Any, ...] = (r.job_id, r.server_id, r.attempt)
    claimed = claim_token(r)
    if claimed is not None:
        guard += " AND attempted_at = %s"
        fence = (*fence, to_db(claimed))
    return Stmt(
        f"UPDATE kiln_jobs SET {', '.join(sets)}"
        f" WHERE id = %s AND state = 'running' AND server_id = %s AND attempt = %s{guard}",
        (*params, *fence),
    )


def lock_dependents(dep_ids: Sequence[int]) -> tuple[Stmt, Stmt]:
    """Lock the awaiting dependents of ``dep_ids``, then list those still blocked."""
    sub = f"SELECT job_id FROM kiln_job_deps WHERE dep_id IN ({marks(len(dep_ids))})"
    lock = Stmt(
        f"SELECT j.id, j.queue, j.rate_key IS NOT NULL, j.run_at > {NOW}, {NOW}"
        f" FROM kiln_jobs j WHERE j.state = 'awaiting' AND j.id IN ({sub})"
        " ORDER BY j.id FOR UPDATE",
        list(dep_ids),
    )
    blocked = Stmt(
        "SELECT DISTINCT d.job_id FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
        f" WHERE d.job_id IN ({sub}) AND o.state <> 'completed'",
        list(dep_ids),
    )
    return lock, blocked


def release_dependents(locked: Result, blocked: Result) -> tuple[Stmt | None, dict[str, int]]:
    """The UPDATE that releases the unblocked locked dependents, and the queues that
    get available jobs from it."""
    stuck = {int(r[0]) for r in blocked.rows}
    free = [r for r in locked.rows if int(r[0]) not in stuck]
    if not free:
        return None, {}
    now = free[0][4]
    released: dict[str, int] = {}
    for r in free:
        if not r[2] and not r[3]:
            released[r[1]] = released.get(r[1], 0) + 1
    ids = [r[0] for r in free]
    stmt = Stmt(
        "UPDATE kiln_jobs SET state = CASE WHEN rate_key IS NOT NULL THEN 'pending'"
        " WHEN run_at > %s THEN 'scheduled' ELSE 'available' END, run_at = GREATEST(run_at, %s)"
        f" WHERE id IN ({marks(len(ids))}) AND state = 'awaiting'",
        (now, now, *ids),
    )
    return stmt, released


def merge(into: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    for queue, n in more.items():
        into[queue] = into.get(queue, 0) + n
    return into


def _queues_of(ids: list[int]) -> Stmt:
    """The queues of the jobs ``ids`` that are available now (a retry of a rate-limited
    job went to pending instead)."""
    return Stmt(
        f"SELECT id, queue FROM kiln_jobs WHERE id IN ({marks(len(ids))})"
        " AND state = 'available'",
        ids,
    )


def _plain(r: JobResult) -> bool:
    return r.outcome is Outcome.COMPLETED and r.error is None and not r.rescued


def _completions(done: Sequence[JobResult]) -> tuple[Stmt, Stmt]:
    """Plain completions as two statements for the whole batch: lock the rows the
    update will change (they say which applied), then update them. ``id IN`` gives the
    primary-key range; the row constructor is the fence. Stored results, if any, are
    one CASE on the id (a batch without any writes none)."""
    ids = [r.job_id for r in done]
    stored = [(r.job_id, r.result) for r in done if r.result is not None]
    result_set = ""
    result_params: list[Any] = []
    if stored:
        result_set = (", result = CASE id" + " WHEN %s THEN %s" * len(stored)
                      + " ELSE result END")
        result_params = [x for pair in stored for x in pair]
    fence = [x for r in done for x in (r.job_id, r.server_id, r.attempt)]
    cond = (
        f"id IN ({marks(len(ids))}) AND (id, server_id, attempt) IN"
        f" ({', '.join(['(%s, %s, %s)'] * len(done))})"
        " AND state = 'running' AND has_dependents = FALSE"
    )
    return (
        Stmt(f"SELECT id FROM kiln_jobs WHERE {cond} FOR UPDATE", (*ids, *fence)),
        Stmt(
            f"UPDATE kiln_jobs SET state = 'completed', finished_at = {NOW}, rescues = 0"
            f"{result_set} WHERE {cond}",
            (*result_params, *ids, *fence),
        ),
    )


def results_apply(
    results: Sequence[JobResult],
) -> Plan[tuple[ApplyResult, list[JobResult]]]:
    """One round trip. Returns what applied, and the completions to write again with
    ``results_release`` (their jobs have dependents, or they were fenced)."""
    if not results:
        return ApplyResult(applied=0, released={}), []
    ordered = sorted(results, key=lambda r: r.job_id)  # one lock order
    done = [r for r in ordered if _plain(r)]
    if len(done) < 2:
        done = []
    rest = [r for r in ordered if not done or not _plain(r)]
    stmts: list[Stmt] = list(_completions(done)) if done else []
    stmts.extend(_result_stmt(r, guarded=r.outcome is Outcome.COMPLETED) for r in rest)
    back = [r.job_id for r in rest if next_state(r) is JobState.AVAILABLE]
    if back:
        stmts.append(_queues_of(back))
    out = yield Step(tuple(stmts), begin=len(stmts) > 1, last=True)
    applied = {int(row[0]) for row in out[0].rows} if done else set()
    first = 2 if done else 0
    updates = out[first : first + len(rest)]
    applied.update(r.job_id for r, res in zip(rest, updates, strict=True) if res.rowcount == 1)
    released: dict[str, int] = {}
    if back:
        for job_id, queue in out[first + len(rest)].rows:
            if int(job_id) in applied:
                released[queue] = released.get(queue, 0) + 1
    again = [r for r in ordered if r.outcome is Outcome.COMPLETED and r.job_id not in applied]
    return ApplyResult(applied=len(applied), released=released,
                       applied_ids=frozenset(applied)), again


def results_release(completions: Sequence[JobResult]) -> Plan[ApplyResult]:
    """Write completions of jobs with dependents and release those whose dependencies
    are all complete, in one transaction: two round trips."""
    if not completions:
        return ApplyResult(applied=0, released={})
    ordered = sorted(completions, key=lambda r: r.job_id)
    stmts = [_result_stmt(r, guarded=False) for r in ordered]
    out = yield step(*stmts, *lock_dependents([r.job_id for r in ordered]), begin=True)
    applied = frozenset(
        r.job_id for r, res in zip(ordered, out[: len(ordered)], strict=True) if res.rowcount == 1
    )
    update, released = release_dependents(out[-2], out[-1])
    if update is not None:
        yield step(update, last=True)
    return ApplyResult(applied=len(applied), released=released if update is not None else {},
                       applied_ids=applied)


def attempts_end(results: Sequence[JobResult]) -> Plan[int]:
    """The fenced-off results of jobs cancelled while running end those attempts."""
    fence = [x for r in results for x in (r.job_id, r.server_id, r.attempt)]
    out = yield step(Stmt(
        "UPDATE kiln_jobs SET attempt_running = FALSE WHERE attempt_running"
        f" AND state = 'cancelled' AND id IN ({marks(len(results))}) AND"
        f" (id, server_id, attempt) IN ({', '.join(['(%s, %s, %s)'] * len(results))})",
        (*(r.job_id for r in results), *fence),
    ), last=True)
    return out[0].rowcount


def param_set(job_id: int, server_id: str, attempt: int, name: str, value: Any) -> Plan[bool]:
    # The fenced SELECT decides, not the UPDATE's row count: without CLIENT_FOUND_ROWS
    # MySQL counts changed rows, and writing an unchanged value changes none.
    fence = "id = %s AND state = 'running' AND server_id = %s AND attempt = %s"
    out = yield step(
        Stmt(f"SELECT 1 FROM kiln_jobs WHERE {fence} FOR UPDATE", (job_id, server_id, attempt)),
        Stmt(
            "UPDATE kiln_jobs SET params = JSON_SET(params, CONCAT('$.', JSON_QUOTE(%s)),"
            f" JSON_EXTRACT(%s, '$')) WHERE {fence}",
            (name, dumps(value), job_id, server_id, attempt),
        ),
        begin=True, last=True,
    )
    return bool(out[0].rows)


# release of scheduled jobs -------------------------------------------------------------
_NEXT_DUE = (
    f"SELECT TIMESTAMPDIFF(MICROSECOND, {NOW}, MIN(run_at)) FROM kiln_jobs"
    " WHERE state = 'scheduled'"
)
_NEXT_LATER = _NEXT_DUE + f" AND run_at > {NOW}"


def _next_at(result: Result) -> float | None:
    value = result.rows[0][0] if result.rows else None
    return None if value is None else max(int(value) / 1_000_000, 0.0)


def release_due(probe: bool) -> Plan[ReleaseResult]:
    """With ``probe`` (nothing known to be due), idle, this is one indexed statement
    outside any transaction. When a job is due it locks the due jobs, skipping rows
    another releaser holds (that releaser makes them available), and updates them."""
    if probe:
        first = yield one(_NEXT_DUE)
        nxt = _next_at(first[0])
        if nxt is None or nxt > 0:
            return ReleaseResult(released={}, next_at=nxt)
    out = yield step(
        Stmt(
            f"SELECT id, queue FROM kiln_jobs WHERE state = 'scheduled' AND run_at <= {NOW}"
            f" ORDER BY run_at LIMIT {RELEASE_CAP} FOR UPDATE SKIP LOCKED"
        ),
        Stmt(_NEXT_LATER),
        begin=True,
    )
    rows, later = out[0].rows, _next_at(out[1])
    if not rows:
        return ReleaseResult(released={}, next_at=later)
    ids = [r[0] for r in rows]
    yield step(
        Stmt(f"UPDATE kiln_jobs SET state = 'available' WHERE id IN ({marks(len(ids))})", ids),
        last=True,
    )
    released: dict[str, int] = {}
    for _id, queue in rows:
        released[queue] = released.get(queue, 0) + 1
    return ReleaseResult(released=released, next_at=0.0 if len(rows) >= RELEASE_CAP else later)
