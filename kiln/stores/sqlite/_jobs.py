"""SQLite statements for jobs: insert, claim, results, release and admin.

Servers, leader and maintenance are in _cluster; rate limits in _rates; the schema in
_schema. Write operations run through ``_plan.write`` (BEGIN IMMEDIATE).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from kiln._model._job import (
    FINISHED_STATES,
    EnqueueResult,
    JobResult,
    JobRow,
    JobState,
    NewJob,
    Outcome,
)
from kiln.stores._protocol import ApplyResult, ReleaseResult
from kiln.stores._rows import (
    RAN_UNIQUE,
    args_text,
    attempt_delta,
    claim_token,
    dumps,
    errors_from,
    first_state,
    levels,
    loads,
    next_state,
    readmitted,
    rescue_step,
    resolved,
    run_at_of,
    ts,
    ts_required,
    unique_key_at,
)
from kiln.stores.sqlite._rates import rate_limit_declare
from kiln.stores.sqlite._runs import (
    KEY_CHARS,
    KeyedRun,
    Run,
    insert_keyed_runs,
    insert_runs,
)

T = TypeVar("T")


# rows --------------------------------------------------------------------------------
def row_to_job(row: sqlite3.Row, depends_on: list[int] | None = None) -> JobRow:
    return JobRow(
        id=row["id"],
        queue=row["queue"],
        kind=row["kind"],
        state=JobState(row["state"]),
        args=loads(row["args"]),
        params=loads(row["params"]) or {},
        metadata=loads(row["metadata"]) or {},
        priority=row["priority"],
        run_at=ts_required(row["run_at"]),
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        timeout=row["timeout"],
        backoff=loads(row["backoff"]),
        errors=errors_from(row["errors"]),
        created_at=ts_required(row["created_at"]),
        admitted_at=ts(row["admitted_at"]),
        attempted_at=ts(row["attempted_at"]),
        finished_at=ts(row["finished_at"]),
        server_id=row["server_id"],
        rate_key=row["rate_key"],
        rescues=row["rescues"],
        depends_on=depends_on or [],
        tags=loads(row["tags"]) if row["tags"] else [],
        conc_key=row["conc_key"],
    )


# insert ------------------------------------------------------------------------------
def _unmet(conn: sqlite3.Connection, deps: Sequence[int]) -> bool:
    if not deps:
        return False
    marks = ",".join("?" * len(deps))
    row = conn.execute(
        f"SELECT 1 FROM kiln_jobs WHERE id IN ({marks}) AND state != 'completed' LIMIT 1",
        list(deps),
    ).fetchone()
    return row is not None


INSERT_MANY = (
    "INSERT INTO kiln_jobs (queue, kind, state, metadata, priority, run_at, max_attempts,"
    " timeout, backoff, created_at, rate_key, tags, args, unique_key, unique_states)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
KEYS_PER_READ = 500  # bound variables per read of the keys' holders


def _batchable(job: NewJob) -> bool:
    # a job under a concurrency limit takes the row-by-row path, which writes its key
    # and so does one enqueued without a declaration (it writes the defaulted bits)
    return (not job.depends_on and job.rate_limit is None and job.conc_key is None
            and not job.defaulted)


def _insert_batch(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[int]:
    """Jobs without dependencies or rate limits to declare, as runs of shared columns
    (kiln.stores.sqlite._runs), unique ones with their keys; when the runs skipped some
    jobs (a key held), one read of the new rows and of the skipped keys' holders
    (nothing skipped, the ids follow: no read). The caller's transaction holds the write
    lock from the first row to the commit and ids are AUTOINCREMENT: the rows this call
    inserts take the ids after the highest one so far, in order, and a key's holder with
    such an id is ours."""
    now = time.time()
    meta_last: dict[str, Any] | None = None
    meta_text = "{}"
    runs: list[Run | KeyedRun] = []
    texts: list[str] = []
    run_keys: list[str] = []
    last: tuple[Any, ...] = ()
    keys: list[str | None] = []
    keyed = True  # every key fits KEYED_INSERT (key_of's do)
    for job in jobs:
        run_at = run_at_of(job, now)
        metadata = job.metadata
        if metadata != meta_last:  # a batch's jobs mostly share theirs: encoded once
            meta_text, meta_last = dumps(metadata), metadata
        key = unique_key_at(job, now)
        keys.append(key)
        values: tuple[Any, ...] = (
            job.queue, job.kind, first_state(job, run_at, now, False)._value_, meta_text,
            job.priority, run_at, job.max_attempts, job.timeout,
            None if job.backoff is None else dumps(job.backoff), now, job.rate_key,
            dumps(list(job.tags)) if job.tags else None,
        )
        own = job.unique_key
        if own is not None:
            if len(own) != KEY_CHARS or not own.isascii():
                keyed = False
            values = (*values, job.unique_states, key[len(own):] if key else "")
        if values != last:  # a new run: consecutive jobs mostly share these
            last, texts, run_keys = values, [], []
            if own is None:
                runs.append((values, texts))
            else:
                runs.append((values[:-2], values[-2], values[-1], texts, run_keys))
        texts.append(args_text(job))
        if own is not None:
            run_keys.append(own)
    if all(key is None for key in keys):
        return insert_runs(conn, [r for r in runs if len(r) == 2])
    first_new = _next_id(conn)
    if keyed:
        if insert_keyed_runs(conn, runs) == len(jobs):
            return _all_inserted(conn, keys)
        return _read_back(conn, first_new, keys)
    rows = _many_rows(runs)  # a key of another length: one executemany
    if conn.executemany(INSERT_MANY, rows).rowcount == len(rows):
        return _all_inserted(conn, keys)
    return _read_back(conn, first_new, keys)


def _many_rows(runs: Sequence[Run | KeyedRun]) -> list[tuple[Any, ...]]:
    """INSERT_MANY's values of the runs' jobs, in order."""
    rows: list[tuple[Any, ...]] = []
    for run in runs:
        if len(run) == 2:
            rows.extend((*run[0], text, None, 0) for text in run[1])
        else:
            shared, states, tail, texts, keys = run
            rows.extend((*shared, text, own + tail, states)
                        for text, own in zip(texts, keys, strict=True))
    return rows


def _next_id(conn: sqlite3.Connection) -> int:
    """The id the next row inserted takes (the caller holds the write lock)."""
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'kiln_jobs'").fetchone()
    top = conn.execute("SELECT max(id) FROM kiln_jobs").fetchone()
    return max(int(seq[0]) if seq else 0, int(top[0] or 0)) + 1


def _read_back(conn: sqlite3.Connection, first_new: int, keys: list[str | None]) -> list[int]:
    """The ids of a batch some of whose unique jobs were skipped; ``keys``: each job's
    stored key, in the order the rows were inserted."""
    # the new rows, in insertion order (a skipped row may still have taken an id); a
    # unique job whose key is not the next new row's was skipped: a holder has its key
    new_rows = conn.execute(
        "SELECT id, unique_key FROM kiln_jobs WHERE id >= ? ORDER BY id", (first_new,)
    ).fetchall()
    position = 0
    ids: list[int] = []
    seen: dict[str, int] = {}
    skipped: dict[int, str] = {}  # index in jobs -> key held by an older job
    for index, key in enumerate(keys):
        if key is not None and key in seen:  # a later job of a key this batch has
            ids.append(EnqueueResult(seen[key], False))
            continue
        row = new_rows[position] if position < len(new_rows) else None
        if row is not None and row[1] == key:
            position += 1
            job_id = int(row[0])
            if key is None:
                ids.append(job_id)
                continue
            seen[key] = job_id
            ids.append(EnqueueResult(job_id, True))
        elif key is None:  # pragma: no cover - the write lock rules it out
            raise RuntimeError("kiln: a batch insert's ids are not the ones expected")
        else:
            skipped[index] = key
            ids.append(0)  # placed below
    if position != len(new_rows):  # pragma: no cover - as above
        raise RuntimeError("kiln: a batch insert wrote rows it cannot account for")
    if skipped:
        holders = _holders(conn, sorted(set(skipped.values())))
        for index, key in skipped.items():
            ids[index] = EnqueueResult(holders[key], False)
    return ids


def _all_inserted(conn: sqlite3.Connection, keys: list[str | None]) -> list[int]:
    """Nothing skipped: the ids run, in order, up to the last one inserted (no read of
    the new rows); a unique job's is an EnqueueResult."""
    last = int(conn.execute("SELECT last_insert_rowid()").fetchone()[0])
    ids = range(last - len(keys) + 1, last + 1)
    if all(key is None for key in keys):
        return list(ids)
    new = int.__new__  # an inserted unique job's result: the class's inserted=True
    return [i if key is None else new(EnqueueResult, i) for i, key in zip(ids, keys, strict=True)]


def _holders(conn: sqlite3.Connection, keys: list[str]) -> dict[str, int]:
    """The id of the job that holds each key (after our insert, every key has one)."""
    found: dict[str, int] = {}
    for start in range(0, len(keys), KEYS_PER_READ):
        part = keys[start:start + KEYS_PER_READ]
        rows = conn.execute(
            f"SELECT unique_key, id FROM kiln_jobs WHERE unique_key IN"
            f" ({','.join('?' * len(part))}) AND {COUNTED}", part,
        )
        found.update((key, int(job_id)) for key, job_id in rows)
    return found


def insert(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[int]:
    """Insert ``jobs`` in the caller's transaction (``_plan.write`` or ``_plan.joined``);
    ids in input order, unique jobs' as EnqueueResults."""
    if any(j.after for j in jobs):  # level by level: each level's ids resolve the next's
        ids: list[int] = [0] * len(jobs)
        for level in levels(jobs):
            got = insert(conn, [resolved(jobs[i], ids) for i in level])
            for i, job_id in zip(level, got, strict=True):
                ids[i] = job_id
        return ids
    if len(jobs) > 1 and conn.in_transaction and all(_batchable(j) for j in jobs):
        return _insert_batch(conn, jobs)
    now = time.time()
    ids = []
    concurrency_keys_declare(conn, jobs)
    for job in jobs:
        run_at = run_at_of(job, now)
        if job.rate_limit is not None and job.rate_key is not None:
            rate_limit_declare(conn, job.rate_key, job.rate_limit)
        state = first_state(job, run_at, now, _unmet(conn, job.depends_on))
        key = unique_key_at(job, now)
        row = conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, metadata, priority, run_at,"
            " max_attempts, timeout, backoff, created_at, rate_key, unique_key, unique_states,"
            " tags, conc_key, defaulted)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING RETURNING id",
            (
                job.queue, job.kind, state.value, args_text(job), dumps(job.metadata),
                job.priority, run_at, job.max_attempts, job.timeout,
                None if job.backoff is None else dumps(job.backoff), now, job.rate_key,
                key, job.unique_states, dumps(list(job.tags)) if job.tags else None,
                job.conc_key, job.defaulted,
            ),
        ).fetchone()
        if key is not None:  # the one writer holds the lock: the holder cannot change
            ids.append(EnqueueResult(int(row[0]), True) if row else _holder(conn, key))
            continue
        job_id = int(row[0])
        if job.depends_on:
            conn.executemany(
                "INSERT OR IGNORE INTO kiln_job_deps (job_id, dep_id) VALUES (?, ?)",
                [(job_id, dep) for dep in job.depends_on],
            )
        ids.append(job_id)
    return ids


def concurrency_keys_declare(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> None:
    """The rows of the jobs' concurrency keys, with the max they were enqueued with."""
    concurrency_keys_declare_of(
        conn, {j.conc_key: j.conc_max for j in jobs if j.conc_key is not None}
    )


def concurrency_keys_declare_of(conn: sqlite3.Connection, keys: Mapping[str, int]) -> None:
    if keys:
        conn.executemany(
            "INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES (?, ?)"
            " ON CONFLICT (conc_key) DO UPDATE SET max = excluded.max"
            " WHERE max <> excluded.max", sorted(keys.items()),
        )


# the states in which a unique job holds its key, as the index kiln_jobs_unique tests them
COUNTED = (
    "unique_key IS NOT NULL AND (unique_states & (CASE state WHEN 'awaiting' THEN 1"
    " WHEN 'pending' THEN 2 WHEN 'scheduled' THEN 4 WHEN 'available' THEN 8"
    " WHEN 'running' THEN 16 WHEN 'completed' THEN 32 WHEN 'failed' THEN 64"
    " ELSE 128 END)) <> 0"
)


# a requeue leaves a unique job whose key another job holds where it is
NOT_HELD = (
    "(unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM kiln_jobs o"
    " WHERE o.unique_key = kiln_jobs.unique_key AND o.id <> kiln_jobs.id AND "
    + COUNTED.replace("unique_", "o.unique_").replace("CASE state", "CASE o.state") + "))"
)


def _holder(conn: sqlite3.Connection, key: str) -> EnqueueResult:
    row = conn.execute(
        f"SELECT id FROM kiln_jobs WHERE unique_key = ? AND {COUNTED}", (key,)
    ).fetchone()
    return EnqueueResult(int(row[0]), False)


# claim and results -------------------------------------------------------------------
def claim(
    conn: sqlite3.Connection, queue: str, kinds: list[str], limit: int, server_id: str
) -> list[JobRow]:
    if not kinds or limit <= 0:
        return []
    now = time.time()
    marks = ",".join("?" * len(kinds))
    rows = conn.execute(
        "UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1, attempted_at = ?,"
        f" {RAN_UNIQUE},"
        " server_id = ? WHERE id IN (SELECT id FROM kiln_jobs WHERE state = 'available'"
        f" AND queue = ? AND kind IN ({marks}) AND NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p"
        " WHERE p.queue IN (kiln_jobs.queue, '*')) AND conc_key IS NULL AND NOT EXISTS"
        " (SELECT 1 FROM kiln_concurrency_keys c WHERE c.conc_key = 'queue:' || kiln_jobs.queue)"
        " ORDER BY priority, run_at, id LIMIT ?)"
        " RETURNING *",
        [now, server_id, queue, *kinds, limit],
    ).fetchall()
    jobs = [row_to_job(row) for row in rows]
    jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
    return jobs


def release_dependents(
    conn: sqlite3.Connection, dep_ids: Sequence[int], now: float
) -> dict[str, int]:
    """Move awaiting dependents of ``dep_ids`` whose dependencies are all done."""
    if not dep_ids:
        return {}
    marks = ",".join("?" * len(dep_ids))
    rows = conn.execute(
        "SELECT j.id, j.queue, j.rate_key, j.run_at FROM kiln_jobs j WHERE j.state = 'awaiting'"
        f" AND j.id IN (SELECT job_id FROM kiln_job_deps WHERE dep_id IN ({marks}))"
        f" AND {MET}",
        list(dep_ids),
    ).fetchall()
    return {q: a for q, (a, _all) in release_rows(conn, rows, now).items() if a}


# every dependency of j completed, or gone (a missing dependency counts as met)
MET = (
    "NOT EXISTS (SELECT 1 FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
    " WHERE d.job_id = j.id AND o.state != 'completed')"
)


def release_rows(
    conn: sqlite3.Connection, rows: Sequence[sqlite3.Row], now: float
) -> dict[str, tuple[int, int]]:
    """Release awaiting jobs (id, queue, rate_key, run_at) to the state their options
    give; returns queue -> (made available, released in all)."""
    out: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row["rate_key"] is not None:
            state = JobState.PENDING
        elif row["run_at"] > now:
            state = JobState.SCHEDULED
        else:
            state = JobState.AVAILABLE
        conn.execute(
            "UPDATE kiln_jobs SET state = ?, run_at = MAX(run_at, ?) WHERE id = ?",
            (state.value, now, row["id"]),
        )
        available, total = out.get(row["queue"], (0, 0))
        out[row["queue"]] = (available + (state is JobState.AVAILABLE), total + 1)
    return out


def _results_apply_sql(with_result: bool) -> str:
    """The fenced update of one result; with a stored result, one more column (the
    results of None, the common case, run the statement without it)."""
    result = " result = ?," if with_result else ""
    return (
        # a rate-limited job's next attempt starts once admitted (_rows.readmitted)
        "UPDATE kiln_jobs SET state = CASE WHEN ? AND rate_key IS NOT NULL THEN 'pending'"
        " ELSE ? END, attempt = attempt + ?, run_at = COALESCE(?, run_at),"
        f" finished_at = ?,{result}"
        " rescues = CASE ? WHEN 1 THEN rescues + 1 WHEN 0 THEN rescues ELSE 0 END,"
        " errors = CASE WHEN ? IS NULL THEN errors"
        "  ELSE json_insert(errors, '$[#]', json(?)) END,"
        " server_id = CASE WHEN ? IN ('completed', 'failed', 'cancelled')"
        "  THEN server_id ELSE NULL END"
        " WHERE id = ? AND state = 'running' AND server_id = ? AND attempt = ?"
        " AND (? IS NULL OR abs(attempted_at - ?) < 0.000002)"
        " RETURNING queue, state"
    )


RESULTS_APPLY = _results_apply_sql(with_result=False)
RESULTS_APPLY_STORED = _results_apply_sql(with_result=True)


def results_apply(conn: sqlite3.Connection, results: Sequence[JobResult]) -> ApplyResult:
    now = time.time()
    applied: set[int] = set()
    completed: list[int] = []
    released: dict[str, int] = {}
    for r in results:
        state = next_state(r)
        finished = now if state in FINISHED_STATES else None
        error = None if r.error is None else dumps(r.error.to_json())
        head = (
            readmitted(r), state.value, attempt_delta(r),
            None if finished is not None else now + max(r.run_at_delay, 0.0), finished,
        )
        claimed = claim_token(r)
        token = None if claimed is None else claimed.timestamp()
        tail = (rescue_step(r), error, error, state.value, r.job_id, r.server_id, r.attempt,
                token, token)
        if r.result is None:
            cur = conn.execute(RESULTS_APPLY, (*head, *tail)).fetchone()
        else:
            cur = conn.execute(RESULTS_APPLY_STORED, (*head, r.result, *tail)).fetchone()
        if cur is None:
            continue
        applied.add(r.job_id)
        if cur["state"] == JobState.AVAILABLE.value:
            released[cur["queue"]] = released.get(cur["queue"], 0) + 1
        if r.outcome is Outcome.COMPLETED:
            completed.append(r.job_id)
    for queue, n in release_dependents(conn, completed, now).items():
        released[queue] = released.get(queue, 0) + n
    if len(applied) < len(results):
        attempts_end(conn, results)
    return ApplyResult(applied=len(applied), released=released, applied_ids=frozenset(applied))


def attempts_end(conn: sqlite3.Connection, results: Sequence[JobResult]) -> None:
    """The fenced-off results of jobs cancelled while running end those attempts."""
    conn.executemany(
        "UPDATE kiln_jobs SET attempt_running = 0 WHERE id = ? AND attempt_running"
        " AND state = 'cancelled' AND server_id = ? AND attempt = ?",
        [(r.job_id, r.server_id, r.attempt) for r in results],
    )


def param_set(
    conn: sqlite3.Connection, job_id: int, server_id: str, attempt: int, name: str, value: Any
) -> bool:
    cur = conn.execute(
        "UPDATE kiln_jobs SET params = json_set(params, '$.' || json_quote(?), json(?))"
        " WHERE id = ? AND state = 'running' AND server_id = ? AND attempt = ?",
        (name, dumps(value), job_id, server_id, attempt),
    )
    return cur.rowcount == 1


def release_due(conn: sqlite3.Connection) -> ReleaseResult:
    now = time.time()
    rows = conn.execute(
        "UPDATE kiln_jobs SET state = 'available' WHERE state = 'scheduled' AND run_at <= ?"
        " RETURNING queue",
        (now,),
    ).fetchall()
    released: dict[str, int] = {}
    for row in rows:
        released[row[0]] = released.get(row[0], 0) + 1
    nxt = conn.execute(
        "SELECT MIN(run_at) FROM kiln_jobs WHERE state = 'scheduled'"
    ).fetchone()[0]
    return ReleaseResult(released=released, next_at=None if nxt is None else max(nxt - now, 0.0))

