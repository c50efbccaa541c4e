"""SQLite statements for jobs: insert, claim, results, release and admin.

Servers, leader and maintenance are in _cluster; rate limits in _rates; the schema in
_schema. Write operations run through ``_plan.write`` (BEGIN IMMEDIATE).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any, TypeVar

from kiln._job import (
    FINISHED_STATES,
    EnqueueResult,
    JobFilter,
    JobResult,
    JobRow,
    JobState,
    NewJob,
    Outcome,
    StateCount,
)
from kiln.stores._filters import (
    DELETABLE,
    MAKE_DUE,
    REQUEUEABLE,
    FilterSql,
    compile_filter,
    members,
)
from kiln.stores._protocol import ApplyResult, ReleaseResult
from kiln.stores._rows import (
    args_text,
    attempt_delta,
    dumps,
    epoch,
    errors_from,
    first_state,
    loads,
    next_state,
    readmitted,
    rescue_step,
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
    )


# the error messages only, not the JSON around them (keys, timestamps, tracebacks)
ERROR_MATCH = (
    "EXISTS (SELECT 1 FROM json_each(kiln_jobs.errors) e"
    " WHERE instr(kiln_lower(json_extract(e.value, '$.error')), ?) > 0)"
)


TAG_MATCH = "EXISTS (SELECT 1 FROM json_each(kiln_jobs.tags) t WHERE t.value = ?)"


def tag_clauses(f: JobFilter) -> tuple[list[str], list[Any]]:
    """All of the tags, and metadata / args keys equal to values, compared by JSON type
    and value (json_extract alone reads true as 1). No index serves these: they are
    checked on the rows the other conditions leave (see docs/guide.md)."""
    clauses = [TAG_MATCH] * len(f.tags)
    params: list[Any] = list(f.tags)
    for column, pairs in (("metadata", f.metadata), ("args", f.args)):
        for key, value in pairs.items():
            path = f'$."{key}"'
            if isinstance(value, bool):
                clauses.append(f"json_type({column}, ?) = ?")
                params.extend((path, "true" if value else "false"))
                continue
            kinds = "'text'" if isinstance(value, str) else "'integer', 'real'"
            clauses.append(
                f"json_type({column}, ?) IN ({kinds}) AND json_extract({column}, ?) = ?"
            )
            params.extend((path, path, value))
    return clauses, params


FILTER_SQL = FilterSql(
    mark="?",
    true="1=1",
    member=members("?"),
    errors=lambda text: ([ERROR_MATCH], [text.lower()]),
    tagged=tag_clauses,
    when=epoch,
)


def where(f: JobFilter, allowed: Sequence[str] | None = None) -> tuple[str, list[Any]]:
    return compile_filter(f, FILTER_SQL, allowed)


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
    return not job.depends_on and job.rate_limit is None and job.conc_key is None


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


def insert_jobs(conn: sqlite3.Connection, jobs: Sequence[NewJob]) -> list[int]:
    if len(jobs) > 1 and conn.in_transaction and all(_batchable(j) for j in jobs):
        return _insert_batch(conn, jobs)
    now = time.time()
    ids: list[int] = []
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
            " tags, conc_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING RETURNING id",
            (
                job.queue, job.kind, state.value, args_text(job), dumps(job.metadata),
                job.priority, run_at, job.max_attempts, job.timeout,
                None if job.backoff is None else dumps(job.backoff), now, job.rate_key,
                key, job.unique_states, dumps(list(job.tags)) if job.tags else None,
                job.conc_key,
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
    keys = {j.conc_key: j.conc_max for j in jobs if j.conc_key is not None}
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


def _release_dependents(
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


def _apply_sql(with_result: bool) -> str:
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
        " RETURNING queue, state"
    )


APPLY = _apply_sql(with_result=False)
APPLY_STORED = _apply_sql(with_result=True)


def apply_results(conn: sqlite3.Connection, results: Sequence[JobResult]) -> ApplyResult:
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
        tail = (rescue_step(r), error, error, state.value, r.job_id, r.server_id, r.attempt)
        if r.result is None:
            cur = conn.execute(APPLY, (*head, *tail)).fetchone()
        else:
            cur = conn.execute(APPLY_STORED, (*head, r.result, *tail)).fetchone()
        if cur is None:
            continue
        applied.add(r.job_id)
        if cur["state"] == JobState.AVAILABLE.value:
            released[cur["queue"]] = released.get(cur["queue"], 0) + 1
        if r.outcome is Outcome.COMPLETED:
            completed.append(r.job_id)
    for queue, n in _release_dependents(conn, completed, now).items():
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


# admin -------------------------------------------------------------------------------
def _deps_of(conn: sqlite3.Connection, job_id: int) -> list[int]:
    rows = conn.execute(
        "SELECT dep_id FROM kiln_job_deps WHERE job_id = ? ORDER BY dep_id", (job_id,)
    ).fetchall()
    return [int(r[0]) for r in rows]


def get(conn: sqlite3.Connection, job_id: int) -> JobRow | None:
    row = conn.execute("SELECT * FROM kiln_jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        return None
    job = row_to_job(row, _deps_of(conn, job_id))
    job.result = loads(row["result"])
    return job


def dependency_results(conn: sqlite3.Connection, job_id: int) -> dict[int, Any]:
    rows = conn.execute(
        "SELECT d.dep_id, j.result FROM kiln_job_deps d JOIN kiln_jobs j ON j.id = d.dep_id"
        " WHERE d.job_id = ? ORDER BY d.dep_id", (job_id,),
    ).fetchall()
    return {int(r[0]): loads(r[1]) for r in rows}


def list_jobs(
    conn: sqlite3.Connection, f: JobFilter, limit: int, before_id: int | None,
    after_id: int | None = None,
) -> list[JobRow]:
    """Newest first below ``before_id``; oldest first above ``after_id`` when given."""
    return [row_to_job(r) for r in _listed(conn, f, limit, before_id, after_id, "*")]


def list_ids(
    conn: sqlite3.Connection, f: JobFilter, limit: int, before_id: int | None
) -> list[int]:
    """The ids of ``list_jobs``' page, without reading the rows' columns."""
    return [int(r[0]) for r in _listed(conn, f, limit, before_id, None, "id")]


def _listed(
    conn: sqlite3.Connection, f: JobFilter, limit: int, before_id: int | None,
    after_id: int | None, cols: str,
) -> list[Any]:
    cond, params = where(f)
    if before_id is not None:
        cond += " AND id < ?"
        params.append(before_id)
    if after_id is not None:
        cond += " AND id > ?"
        params.append(after_id)
    order = "ASC" if after_id is not None else "DESC"
    return conn.execute(
        f"SELECT {cols} FROM kiln_jobs WHERE {cond} ORDER BY id {order} LIMIT ?",
        [*params, limit],
    ).fetchall()


def count(conn: sqlite3.Connection, f: JobFilter) -> int:
    cond, params = where(f)
    return int(conn.execute(f"SELECT COUNT(*) FROM kiln_jobs WHERE {cond}", params).fetchone()[0])


# a job cancelled while running waits until that attempt ended or its server is dead
ATTEMPT_OVER = (
    "NOT (attempt_running AND server_id IN (SELECT id FROM kiln_servers"
    " WHERE heartbeat_at > ?))"
)


def requeue(conn: sqlite3.Connection, f: JobFilter, dead_after: float) -> int:
    cond, params = where(f, REQUEUEABLE)
    movable = f"{cond} AND {NOT_HELD} AND {ATTEMPT_OVER}"
    now = time.time()
    cur = conn.execute(
        "UPDATE kiln_jobs SET state = CASE WHEN EXISTS (SELECT 1 FROM kiln_job_deps d"
        " JOIN kiln_jobs o ON o.id = d.dep_id WHERE d.job_id = kiln_jobs.id"
        " AND o.state != 'completed') THEN 'awaiting'"
        " WHEN rate_key IS NULL THEN 'available' ELSE 'pending' END,"
        # admitted_at stays: the admission window of the key must keep counting it
        " attempt = 0, rescues = 0, run_at = ?, finished_at = NULL,"
        f" server_id = NULL, attempt_running = 0, result = NULL WHERE {movable}"
        " AND (unique_key IS NULL"
        # of the jobs of one key that would go back, only the newest does
        " OR id IN (SELECT max(id) FROM kiln_jobs WHERE unique_key IS NOT NULL"
        f" AND {movable} GROUP BY unique_key))",
        [now, *params, now - dead_after, *params, now - dead_after],
    )
    return cur.rowcount


def make_due(conn: sqlite3.Connection, f: JobFilter) -> int:
    """Bring the run_at of matching scheduled and pending jobs forward to now."""
    cond, params = where(f, MAKE_DUE)
    now = time.time()
    cur = conn.execute(
        f"UPDATE kiln_jobs SET run_at = ? WHERE {cond} AND run_at > ?", [now, *params, now]
    )
    return cur.rowcount


def delete(conn: sqlite3.Connection, f: JobFilter) -> int:
    cond, params = where(f, DELETABLE)
    ids = [int(r[0]) for r in conn.execute(f"SELECT id FROM kiln_jobs WHERE {cond}", params)]
    if not ids:
        return 0
    remove(conn, ids)
    return len(ids)


def remove(conn: sqlite3.Connection, ids: Sequence[int]) -> None:
    """Delete the jobs ``ids`` and release their dependents that waited only on them (a
    missing dependency counts as met). Shared by delete and prune, so a pruned
    dependency frees its dependents as a deleted one does."""
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        marks = ",".join("?" * len(chunk))
        conn.execute(f"DELETE FROM kiln_jobs WHERE id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM kiln_job_deps WHERE job_id IN ({marks})", chunk)
        _release_dependents(conn, chunk, time.time())
        conn.execute(f"DELETE FROM kiln_job_deps WHERE dep_id IN ({marks})", chunk)


def dependents(conn: sqlite3.Connection, job_id: int) -> list[int]:
    rows = conn.execute(
        "SELECT job_id FROM kiln_job_deps WHERE dep_id = ? ORDER BY job_id", (job_id,)
    ).fetchall()
    return [int(r[0]) for r in rows]


def state_counts(conn: sqlite3.Connection) -> list[StateCount]:
    rows = conn.execute(
        "SELECT queue, state, COUNT(*) FROM kiln_jobs GROUP BY state, queue"
    ).fetchall()
    return [StateCount(queue=r[0], state=JobState(r[1]), count=int(r[2])) for r in rows]


def oldest_available(conn: sqlite3.Connection) -> dict[str, float]:
    now = time.time()
    rows = conn.execute(
        "SELECT queue, MIN(run_at) FROM kiln_jobs WHERE state = 'available' GROUP BY queue"
    ).fetchall()
    return {r[0]: max(now - r[1], 0.0) for r in rows}


def counts_by_kind(conn: sqlite3.Connection) -> list[tuple[str, JobState, int]]:
    rows = conn.execute("SELECT kind, state, COUNT(*) FROM kiln_jobs GROUP BY kind, state")
    return [(r[0], JobState(r[1]), int(r[2])) for r in rows.fetchall()]


def finished_series(
    conn: sqlite3.Connection, since: float, bucket: float
) -> list[tuple[int, str, int]]:
    now = time.time()
    rows = conn.execute(
        "SELECT CAST((? - finished_at) / ? AS INTEGER) AS b, state, COUNT(*) FROM kiln_jobs"
        " WHERE state IN ('completed', 'failed', 'cancelled') AND finished_at >= ?"
        " GROUP BY b, state",
        (now, bucket, now - since),
    ).fetchall()
    return [(max(int(r[0]), 0), r[1], int(r[2])) for r in rows]


def completed_series_by_queue(
    conn: sqlite3.Connection, since: float, bucket: float
) -> list[tuple[str, int, int]]:
    now = time.time()
    rows = conn.execute(
        "SELECT queue, CAST((? - finished_at) / ? AS INTEGER) AS b, COUNT(*) FROM kiln_jobs"
        " WHERE state = 'completed' AND finished_at >= ? GROUP BY queue, b",
        (now, bucket, now - since),
    ).fetchall()
    return [(r[0], max(int(r[1]), 0), int(r[2])) for r in rows]


def running_by_server(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
    rows = conn.execute(
        "SELECT queue, COALESCE(server_id, ''), COUNT(*) FROM kiln_jobs"
        " WHERE state = 'running' GROUP BY queue, server_id"
    ).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]


def throughput(conn: sqlite3.Connection, since: float) -> dict[str, int]:
    rows = conn.execute(
        "SELECT state, COUNT(*) FROM kiln_jobs WHERE state IN ('completed', 'failed', 'cancelled')"
        " AND finished_at >= ? GROUP BY state",
        (time.time() - since,),
    ).fetchall()
    return {r[0]: int(r[1]) for r in rows}
