"""SQLite statements for admin: a filter's WHERE clause, reading and listing jobs,
counts and series for the dashboard, and the bulk actions (requeue, make due,
delete).

The filter's shape and the states each action may touch are kiln.stores._filters';
this module gives SQLite's pieces. Bulk actions run through ``_plan.write`` (BEGIN
IMMEDIATE).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from kiln._model._idset import sums_sql
from kiln._model._job import JobFilter, JobRow, JobState, StateCount
from kiln.stores._filters import (
    DELETABLE,
    MAKE_DUE,
    REQUEUEABLE,
    FilterSql,
    compile_filter,
    members,
    page,
)
from kiln.stores._rows import BRIEF_BYTES, CUT, brief_cols, epoch, loads, uncut
from kiln.stores.sqlite._concurrency import keys_back
from kiln.stores.sqlite._finished import (
    completed_series_by_queue as completed_series_by_queue,
)
from kiln.stores.sqlite._finished import finished_series as finished_series
from kiln.stores.sqlite._finished import throughput as throughput
from kiln.stores.sqlite._jobs import NOT_HELD, release_dependents, row_to_job
from kiln.stores.sqlite._listing import page_rows
from kiln.stores.sqlite._rollup import timings as timings

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


LAST_ERROR = "json_extract(errors, '$[#-1].error')"  # the last attempt's error message


FILTER_SQL = FilterSql(
    mark="?",
    true="1=1",
    member=members("?"),
    errors=lambda text: ([ERROR_MATCH], [text.lower()]),
    last_error=lambda text: ([f"{LAST_ERROR} = ?"], [text]),
    tagged=tag_clauses,
    when=epoch,
)


def where(f: JobFilter, allowed: Sequence[str] | None = None) -> tuple[str, list[Any]]:
    return compile_filter(f, FILTER_SQL, allowed)



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
    after_id: int | None = None, brief: bool = False,
) -> list[JobRow]:
    """Newest first below ``before_id``; oldest first above ``after_id`` when given."""
    if not brief:
        return [row_to_job(r) for r in _listed(conn, f, limit, before_id, after_id, "*")]
    jobs = []
    for r in _listed(conn, f, limit, before_id, after_id, BRIEF_COLS):
        values, cut = uncut(dict(zip(r.keys(), r, strict=True)))
        job = row_to_job(values)  # type: ignore[arg-type]  # read by column name
        job.cut = cut
        jobs.append(job)
    return jobs


def _brief(column: str) -> str:
    """A JSON column, or over BRIEF_BYTES its size and stand-in (see _rows.CUT)."""
    size = f"length(CAST({column} AS BLOB))"
    stand = (f"'[' || json_remove(json_extract({column}, '$[#-1]'), '$.traceback') || ']'"
             if column == "errors" else "'null'")
    return (f"CASE WHEN {size} > {BRIEF_BYTES} THEN '{CUT}' || {size} || ':' || {stand}"
            f" ELSE {column} END AS {column}")


BRIEF_COLS = brief_cols((
    "id", "queue", "kind", "state", "args", "params", "metadata", "priority", "run_at",
    "attempt", "max_attempts", "timeout", "backoff", "errors", "created_at", "admitted_at",
    "attempted_at", "finished_at", "server_id", "rate_key", "rescues", "tags", "conc_key",
), _brief)


def list_ids(
    conn: sqlite3.Connection, f: JobFilter, limit: int, before_id: int | None
) -> list[int]:
    """The ids of ``list_jobs``' page, without reading the rows' columns."""
    return [int(r[0]) for r in _listed(conn, f, limit, before_id, None, "id")]


def _listed(
    conn: sqlite3.Connection, f: JobFilter, limit: int, before_id: int | None,
    after_id: int | None, cols: str,
) -> list[Any]:
    merged = page_rows(conn, f, where(f), cols, limit, before_id, after_id)
    if merged is not None:  # read through the index ranges (see _listing)
        return merged
    sql, params = page(f, FILTER_SQL, cols, before_id, after_id)
    return conn.execute(sql, [*params, limit]).fetchall()


def count(conn: sqlite3.Connection, f: JobFilter) -> int:
    cond, params = where(f)
    return int(conn.execute(f"SELECT COUNT(*) FROM kiln_jobs WHERE {cond}", params).fetchone()[0])


ID_SUMS = sums_sql("(({}) % {})")


def id_sums(conn: sqlite3.Connection, f: JobFilter) -> tuple[int, int, int, int, int]:
    """What kiln._model._idset fingerprints, summed in one statement."""
    cond, params = where(f)
    row = conn.execute(f"SELECT {ID_SUMS} FROM kiln_jobs WHERE {cond}", params).fetchone()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4])


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
        f" AND {movable} GROUP BY unique_key)) RETURNING conc_key, kind",
        [now, *params, now - dead_after, *params, now - dead_after],
    )
    rows = cur.fetchall()
    back = {str(key): str(kind) for key, kind in rows if key is not None}
    if back:  # the rows of their keys, which the pruner may have deleted
        keys_back(conn, back)
    return len(rows)


def make_due(conn: sqlite3.Connection, f: JobFilter) -> int:
    """Bring the run_at of matching scheduled and pending jobs forward to now."""
    cond, params = where(f, MAKE_DUE)
    now = time.time()
    cur = conn.execute(
        f"UPDATE kiln_jobs SET run_at = ? WHERE {cond} AND run_at > ?", [now, *params, now]
    )
    return cur.rowcount


def admit_lifted(conn: sqlite3.Connection, f: JobFilter, retries_only: bool) -> int:
    """Make matching pending jobs available now, their rate limits lifted: no token is
    taken, the admission is recorded (kiln.testing's drain); ``retries_only``: only the
    jobs that ran before (attempt > 0)."""
    cond, params = where(f, ("pending",))
    if retries_only:
        cond = f"({cond}) AND attempt > 0"
    now = time.time()
    cur = conn.execute(
        "UPDATE kiln_jobs SET state = 'available', run_at = ?, admitted_at = ?"
        f" WHERE {cond}", [now, now, *params])
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
        release_dependents(conn, chunk, time.time())
        conn.execute(f"DELETE FROM kiln_job_deps WHERE dep_id IN ({marks})", chunk)


def dependents(conn: sqlite3.Connection, job_id: int) -> list[int]:
    rows = conn.execute(
        "SELECT job_id FROM kiln_job_deps WHERE dep_id = ? ORDER BY job_id", (job_id,)
    ).fetchall()
    return [int(r[0]) for r in rows]


def state_counts(
    conn: sqlite3.Connection, states: Sequence[JobState] | None = None
) -> list[StateCount]:
    """Every state's counts, or ``states``' only: a range of kiln_jobs_state_queue
    (state, queue, id) per state asked for, so the live states never read the finished
    jobs."""
    where = ""
    if states is not None:
        names = sorted({JobState(s).value for s in states})
        if not names:
            return []
        where = f" WHERE state IN ({', '.join(repr(n) for n in names)})"
    rows = conn.execute(
        f"SELECT queue, state, COUNT(*) FROM kiln_jobs{where} GROUP BY state, queue"
    ).fetchall()
    return [StateCount(queue=r[0], state=JobState(r[1]), count=int(r[2])) for r in rows]


# Each queue's oldest available job without reading them all: the plain jobs' queues,
# then each queue's priorities, found in kiln_jobs_claim (queue, priority, run_at, id;
# partial: state = 'available' AND conc_key IS NULL) one MIN() descent at a time, and
# the first run_at of each (queue, priority) range; the limited jobs' part walks
# kiln_jobs_conc_available only. ``state = 'available'`` alone matched neither partial
# index and read the whole table: 8.5 s with 5,000,000 jobs waiting (bench/RESULTS.md,
# "scale45"; tests/stores/test_sqlite_oldest_plan.py). INDEXED BY: with statistics,
# SQLite took kiln_jobs_state_queue for the queues and the limited part, and walked every
# available job again (2.3 s at 5M).
_PLAIN = "{t}state = 'available' AND {t}conc_key IS NULL"
OLDEST = (
    "WITH RECURSIVE q(queue) AS (SELECT MIN(queue) FROM kiln_jobs INDEXED BY kiln_jobs_claim"
    f" WHERE {_PLAIN.format(t='')} UNION ALL SELECT (SELECT MIN(k.queue) FROM kiln_jobs k"
    f" INDEXED BY kiln_jobs_claim WHERE {_PLAIN.format(t='k.')}"
    " AND k.queue > q.queue) FROM q WHERE q.queue IS NOT NULL),"
    " p(queue, priority) AS (SELECT q.queue, (SELECT MIN(k.priority) FROM kiln_jobs k"
    f" WHERE {_PLAIN.format(t='k.')} AND k.queue = q.queue) FROM q WHERE q.queue IS NOT NULL"
    " UNION ALL SELECT p.queue, (SELECT MIN(k.priority) FROM kiln_jobs k"
    f" WHERE {_PLAIN.format(t='k.')} AND k.queue = p.queue AND k.priority > p.priority)"
    " FROM p WHERE p.priority IS NOT NULL)"
    " SELECT queue, MIN(first) FROM (SELECT p.queue, (SELECT MIN(j.run_at) FROM kiln_jobs j"
    f" WHERE {_PLAIN.format(t='j.')} AND j.queue = p.queue AND j.priority = p.priority)"
    " AS first FROM p WHERE p.priority IS NOT NULL UNION ALL SELECT queue, MIN(run_at)"
    " FROM kiln_jobs INDEXED BY kiln_jobs_conc_available"
    " WHERE state = 'available' AND conc_key IS NOT NULL GROUP BY queue)"
    " GROUP BY queue"
)


def oldest_available(conn: sqlite3.Connection) -> dict[str, float]:
    now = time.time()
    rows = conn.execute(OLDEST).fetchall()
    return {r[0]: max(now - r[1], 0.0) for r in rows}


# the due end of kiln_jobs_scheduled (run_at, partial: scheduled jobs only). INDEXED BY:
# left to itself SQLite walked every scheduled job through kiln_jobs_state_queue, for
# its GROUP BY order (5.7 s with 2,500,000 scheduled; tests/stores/test_sqlite_oldest_plan.py)
SCHEDULED_DUE = (
    "SELECT queue, COUNT(*) FROM kiln_jobs INDEXED BY kiln_jobs_scheduled"
    " WHERE state = 'scheduled' AND run_at <= ? GROUP BY queue"
)


def scheduled_due(conn: sqlite3.Connection) -> dict[str, int]:
    rows = conn.execute(SCHEDULED_DUE, (time.time(),)).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def counts_by_kind(conn: sqlite3.Connection) -> list[tuple[str, JobState, int]]:
    rows = conn.execute("SELECT kind, state, COUNT(*) FROM kiln_jobs GROUP BY kind, state")
    return [(r[0], JobState(r[1]), int(r[2])) for r in rows.fetchall()]


def available_by_kind(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
    rows = conn.execute("SELECT queue, kind, COUNT(*) FROM kiln_jobs WHERE state = 'available'"
                        " GROUP BY queue, kind")
    return [(str(r[0]), str(r[1]), int(r[2])) for r in rows.fetchall()]


def error_groups(
    conn: sqlite3.Connection, f: JobFilter, limit: int, scan: int
) -> list[tuple[str, int, int]]:
    """(last error, jobs, highest id) of the newest ``scan`` failed jobs under ``f``,
    the most common first."""
    cond, params = where(f, ("failed",))
    rows = conn.execute(
        f"SELECT e, COUNT(*), MAX(id) FROM (SELECT id, {LAST_ERROR} AS e FROM kiln_jobs"
        f" WHERE {cond} AND state = 'failed' AND finished_at IS NOT NULL"
        " ORDER BY finished_at DESC LIMIT ?)"
        " GROUP BY e ORDER BY COUNT(*) DESC, MAX(id) DESC LIMIT ?",
        (*params, scan, limit),
    ).fetchall()
    return [(r[0] or "", int(r[1]), int(r[2])) for r in rows]


def running_by_server(conn: sqlite3.Connection) -> list[tuple[str, str, int]]:
    rows = conn.execute(
        "SELECT queue, COALESCE(server_id, ''), COUNT(*) FROM kiln_jobs"
        " WHERE state = 'running' GROUP BY queue, server_id"
    ).fetchall()
    return [(r[0], r[1], int(r[2])) for r in rows]
