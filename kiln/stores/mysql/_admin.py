"""MySQL/MariaDB plans for admin: a filter's WHERE clause, get, list, count, requeue,
make due, delete, dependents, and the cheap aggregates behind gauges (cancel is in
_cancel).

Owns these statements only. MySQL refuses a subquery on the table an UPDATE or DELETE
changes, so bulk operations lock the matching ids first, then change them by id in
the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln._job import JobFilter, JobRow, JobState, StateCount
from kiln.stores._filters import (
    DELETABLE,
    MAKE_DUE,
    REQUEUEABLE,
    FilterSql,
    compile_filter,
    members,
    page,
)
from kiln.stores._rows import dumps, loads
from kiln.stores.mysql._jobs import (
    JOB_COLS,
    NOW,
    lock_dependents,
    release_dependents,
    row_to_job,
)
from kiln.stores.mysql._plan import Plan, Stmt, marks, micros, one, step, to_db

CHUNK = 1000  # ids per statement in bulk operations


# the error messages only, not the JSON around them (keys, timestamps, tracebacks)
ERROR_MATCH = (
    "EXISTS (SELECT 1 FROM JSON_TABLE(kiln_jobs.errors, '$[*]' COLUMNS"
    " (msg LONGTEXT CHARACTER SET utf8mb4 PATH '$.error')) AS e"
    " WHERE LOCATE(LOWER(%s), LOWER(e.msg)) > 0)"
)


def tag_clauses(f: JobFilter) -> tuple[list[str], list[Any]]:
    """All of the tags (the JSON array holds each), and metadata / args keys equal to
    values. No index serves these: they are checked on the rows the other conditions
    leave (see docs/guide.md, "Tags and filters"). JSON_CONTAINS compares scalars by
    type and value; the type check keeps an array that holds the value from matching."""
    clauses: list[str] = []
    params: list[Any] = []
    if f.tags:
        clauses.append("JSON_CONTAINS(tags, %s)")
        params.append(dumps(list(f.tags)))
    for column, pairs in (("metadata", f.metadata), ("args", f.args)):
        for key, value in pairs.items():
            path = f'$."{key}"'
            clauses.append(
                f"JSON_CONTAINS({column}, %s, %s)"
                f" AND JSON_TYPE(JSON_EXTRACT({column}, %s)) NOT IN ('ARRAY', 'OBJECT')"
            )
            params.extend((dumps(value), path, path))
    return clauses, params


FILTER_SQL = FilterSql(
    mark="%s",
    true="TRUE",
    member=members("%s"),
    errors=lambda text: ([ERROR_MATCH], [text]),
    tagged=tag_clauses,
    when=to_db,
)


def where(f: JobFilter, allowed: Sequence[str] | None = None) -> tuple[str, list[Any]]:
    return compile_filter(f, FILTER_SQL, allowed)


def chunks(ids: list[int]) -> list[list[int]]:
    return [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]


def get(job_id: int) -> Plan[JobRow | None]:
    out = yield step(
        Stmt(f"SELECT {JOB_COLS}, result FROM kiln_jobs WHERE id = %s", (job_id,)),
        Stmt("SELECT dep_id FROM kiln_job_deps WHERE job_id = %s ORDER BY dep_id", (job_id,)),
        last=True,
    )
    if not out[0].rows:
        return None
    row = out[0].rows[0]
    job = row_to_job(row, [int(r[0]) for r in out[1].rows])
    job.result = loads(row[-1])
    return job


def dependency_results(job_id: int) -> Plan[dict[int, Any]]:
    out = yield one(
        "SELECT d.dep_id, j.result FROM kiln_job_deps d JOIN kiln_jobs j ON j.id = d.dep_id"
        " WHERE d.job_id = %s ORDER BY d.dep_id", job_id,
    )
    return {int(r[0]): loads(r[1]) for r in out[0].rows}


def list_jobs(
    f: JobFilter, limit: int, before_id: int | None, after_id: int | None = None
) -> Plan[list[JobRow]]:
    """Newest first below ``before_id``; oldest first above ``after_id`` when given."""
    rows = yield from _listed(f, limit, before_id, after_id, JOB_COLS)
    return [row_to_job(r) for r in rows]


def list_ids(f: JobFilter, limit: int, before_id: int | None) -> Plan[list[int]]:
    """The ids of ``list_jobs``' page, without reading the rows' columns."""
    rows = yield from _listed(f, limit, before_id, None, "id")
    return [int(r[0]) for r in rows]


def _listed(
    f: JobFilter, limit: int, before_id: int | None, after_id: int | None, cols: str
) -> Plan[list[Any]]:
    sql, params = page(f, FILTER_SQL, cols, before_id, after_id)
    out = yield one(sql, *params, limit)
    return list(out[0].rows)


def count(f: JobFilter) -> Plan[int]:
    cond, params = where(f)
    out = yield one(f"SELECT COUNT(*) FROM kiln_jobs WHERE {cond}", *params)
    return int(out[0].rows[0][0])


def _blocked(ids: list[int]) -> Stmt:
    return Stmt(
        "SELECT DISTINCT d.job_id FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
        f" WHERE d.job_id IN ({marks(len(ids))}) AND o.state <> 'completed'",
        ids,
    )


# a requeue leaves a unique job whose key another job holds where it is
NOT_HELD = (
    "(unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM kiln_jobs h"
    " WHERE h.unique_active = kiln_jobs.unique_key AND h.id <> kiln_jobs.id))"
)


# a job cancelled while running waits until that attempt ended or its server is dead
ATTEMPT_OVER = (
    "NOT (attempt_running AND server_id IN (SELECT id FROM kiln_servers"
    f" WHERE heartbeat_at > {NOW} - INTERVAL %s MICROSECOND))"
)


def requeue(f: JobFilter, dead_after: float) -> Plan[int]:
    """Back to the queue with a full retry budget; ``awaiting`` again while a
    dependency is not complete, ``pending`` when rate limited."""
    cond, params = where(f, REQUEUEABLE)
    out = yield step(
        Stmt(f"SELECT id, unique_key FROM kiln_jobs WHERE {cond} AND {NOT_HELD}"
             f" AND {ATTEMPT_OVER} ORDER BY id FOR UPDATE", (*params, micros(dead_after))),
        begin=True,
    )
    newest: dict[str, int] = {}  # of the jobs of one key that would go back, the newest
    ids: list[int] = []
    for job_id, key in out[0].rows:
        if key is None:
            ids.append(int(job_id))
        else:
            newest[key] = int(job_id)  # rows come in id order
    ids = sorted([*ids, *newest.values()])
    for part in chunks(ids):
        blocked = (yield step(_blocked(part)))[0]
        waiting = {int(r[0]) for r in blocked.rows}
        yield step(Stmt(
            "UPDATE kiln_jobs SET state = CASE WHEN id IN"
            f" ({marks(len(waiting)) if waiting else 'NULL'}) THEN 'awaiting'"
            " WHEN rate_key IS NULL THEN 'available' ELSE 'pending' END,"
            f" attempt = 0, rescues = 0, run_at = {NOW}, finished_at = NULL, server_id = NULL,"
            f" attempt_running = FALSE, result = NULL WHERE id IN ({marks(len(part))})",
            (*sorted(waiting), *part),
        ))
    return len(ids)


def make_due(f: JobFilter) -> Plan[int]:
    """Bring the run_at of matching scheduled and pending jobs forward to now."""
    cond, params = where(f, MAKE_DUE)
    out = yield step(
        Stmt(f"UPDATE kiln_jobs SET run_at = {NOW} WHERE {cond} AND run_at > {NOW}", params),
        last=True,
    )
    return int(out[0].rowcount)


def delete(f: JobFilter) -> Plan[int]:
    """Delete, then release what waited only on the deleted jobs."""
    cond, params = where(f, DELETABLE)
    out = yield step(
        Stmt(f"SELECT id FROM kiln_jobs WHERE {cond} AND {NOT_HELD} ORDER BY id FOR UPDATE",
             params),
        begin=True,
    )
    ids = [int(r[0]) for r in out[0].rows]
    yield from remove(ids)
    return len(ids)


def remove(ids: list[int]) -> Plan[None]:
    """Delete the locked jobs ``ids`` and release their dependents that waited only on
    them (a missing dependency counts as met), inside the caller's transaction. Shared
    by delete and prune, so a pruned dependency frees its dependents as a deleted one."""
    for part in chunks(ids):
        m = marks(len(part))
        res = yield step(
            Stmt(f"DELETE FROM kiln_jobs WHERE id IN ({m})", part),
            Stmt(f"DELETE FROM kiln_job_deps WHERE job_id IN ({m})", part),
            *lock_dependents(part),
        )
        update, _ = release_dependents(res[2], res[3])
        stmts = [Stmt(f"DELETE FROM kiln_job_deps WHERE dep_id IN ({m})", part)]
        if update is not None:
            stmts.insert(0, update)
        yield step(*stmts)


def dependents(job_id: int) -> Plan[list[int]]:
    out = yield one("SELECT job_id FROM kiln_job_deps WHERE dep_id = %s ORDER BY job_id", job_id)
    return [int(r[0]) for r in out[0].rows]


def state_counts() -> Plan[list[StateCount]]:
    out = yield one("SELECT queue, state, COUNT(*) FROM kiln_jobs GROUP BY state, queue")
    return [StateCount(queue=r[0], state=JobState(r[1]), count=int(r[2])) for r in out[0].rows]


def oldest_available() -> Plan[dict[str, float]]:
    out = yield one(
        f"SELECT queue, GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(run_at), {NOW}), 0)"
        " FROM kiln_jobs WHERE state = 'available' GROUP BY queue"
    )
    return {r[0]: int(r[1]) / 1_000_000 for r in out[0].rows}


def counts_by_kind() -> Plan[list[tuple[str, JobState, int]]]:
    out = yield one("SELECT kind, state, COUNT(*) FROM kiln_jobs GROUP BY kind, state")
    return [(r[0], JobState(r[1]), int(r[2])) for r in out[0].rows]


def finished_series(since: float, bucket: float) -> Plan[list[tuple[int, str, int]]]:
    out = yield one(
        f"SELECT FLOOR(TIMESTAMPDIFF(MICROSECOND, finished_at, {NOW}) / %s) AS b, state,"
        " COUNT(*) FROM kiln_jobs WHERE state IN ('completed', 'failed', 'cancelled')"
        f" AND finished_at >= {NOW} - INTERVAL %s MICROSECOND GROUP BY b, state",
        micros(bucket), micros(since),
    )
    return [(max(int(r[0]), 0), r[1], int(r[2])) for r in out[0].rows]


def completed_series_by_queue(since: float, bucket: float) -> Plan[list[tuple[str, int, int]]]:
    out = yield one(
        f"SELECT queue, FLOOR(TIMESTAMPDIFF(MICROSECOND, finished_at, {NOW}) / %s) AS b,"
        " COUNT(*) FROM kiln_jobs WHERE state = 'completed'"
        f" AND finished_at >= {NOW} - INTERVAL %s MICROSECOND GROUP BY queue, b",
        micros(bucket), micros(since),
    )
    return [(r[0], max(int(r[1]), 0), int(r[2])) for r in out[0].rows]


def running_by_server() -> Plan[list[tuple[str, str, int]]]:
    out = yield one("SELECT queue, COALESCE(server_id, ''), COUNT(*) FROM kiln_jobs"
                    " WHERE state = 'running' GROUP BY queue, server_id")
    return [(r[0], r[1], int(r[2])) for r in out[0].rows]


def throughput(since: float) -> Plan[dict[str, int]]:
    out = yield one(
        "SELECT state, COUNT(*) FROM kiln_jobs WHERE state IN ('completed', 'failed',"
        f" 'cancelled') AND finished_at >= {NOW} - INTERVAL %s MICROSECOND GROUP BY state",
        micros(since),
    )
    return {r[0]: int(r[1]) for r in out[0].rows}
