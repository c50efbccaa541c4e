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
from kiln.stores._rows import BRIEF_BYTES, CUT, brief_cols, dumps, loads, uncut
from kiln.stores.mysql import _counts
from kiln.stores.mysql._columns import COLUMNS, JOB_COLS, NOW, row_to_job
from kiln.stores.mysql._concurrency import keys_back_stmt
from kiln.stores.mysql._finished import (
    completed_series_by_queue as completed_series_by_queue,
)
from kiln.stores.mysql._finished import finished_series as finished_series
from kiln.stores.mysql._finished import throughput as throughput
from kiln.stores.mysql._jobs import lock_dependents, release_dependents
from kiln.stores.mysql._listing import kind_page
from kiln.stores.mysql._plan import Plan, Stmt, marks, micros, one, step, to_db
from kiln.stores.mysql._rollup import timings as timings

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
            if _past_doubles(value):
                # JSON_CONTAINS compares numbers as doubles: 2**53 + 1 would match
                # 2**53. kiln writes integers as their decimal text, which
                # JSON_EXTRACT returns as it is stored: compare that text exactly.
                clauses.append(
                    f"JSON_TYPE(JSON_EXTRACT({column}, %s)) = 'INTEGER'"
                    f" AND JSON_EXTRACT({column}, %s) = %s"
                )
                params.extend((path, path, str(value)))
                continue
            clauses.append(
                f"JSON_CONTAINS({column}, %s, %s)"
                f" AND JSON_TYPE(JSON_EXTRACT({column}, %s)) NOT IN ('ARRAY', 'OBJECT')"
            )
            params.extend((dumps(value), path, path))
    return clauses, params


def _past_doubles(value: Any) -> bool:
    """An integer whose double also stands for another integer (2**53 and beyond: a
    stored 2**53 + 1 compares equal to 2**53 as doubles)."""
    return type(value) is int and abs(value) >= 2**53


# the last attempt's error message
LAST_ERROR = ("JSON_UNQUOTE(JSON_EXTRACT(errors,"
              " CONCAT('$[', JSON_LENGTH(errors) - 1, '].error')))")


FILTER_SQL = FilterSql(
    mark="%s",
    true="TRUE",
    member=members("%s"),
    errors=lambda text: ([ERROR_MATCH], [text]),
    last_error=lambda text: ([f"JSON_LENGTH(errors) > 0 AND {LAST_ERROR} = %s"], [text]),
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


def _brief(column: str) -> str:
    """A JSON column, or over BRIEF_BYTES its size and stand-in (see _rows.CUT)."""
    stand = (f"CONCAT('[', JSON_REMOVE(JSON_EXTRACT({column}, CONCAT('$[',"
             f" JSON_LENGTH({column}) - 1, ']')), '$.traceback'), ']')"
             if column == "errors" else "'null'")
    return (f"CASE WHEN LENGTH({column}) > {BRIEF_BYTES} THEN CONCAT('{CUT}',"
            f" LENGTH({column}), ':', {stand}) ELSE {column} END AS {column}")


BRIEF_COLS = brief_cols(COLUMNS, _brief)


def list_jobs(
    f: JobFilter, limit: int, before_id: int | None, after_id: int | None = None,
    brief: bool = False,
) -> Plan[list[JobRow]]:
    """Newest first below ``before_id``; oldest first above ``after_id`` when given."""
    rows = yield from _listed(f, limit, before_id, after_id, BRIEF_COLS if brief else JOB_COLS)
    if not brief:
        return [row_to_job(r) for r in rows]
    jobs = []
    for r in rows:
        values, cut = uncut(dict(zip(COLUMNS, r, strict=True)))
        job = row_to_job(tuple(values[c] for c in COLUMNS))
        job.cut = cut
        jobs.append(job)
    return jobs


def list_ids(f: JobFilter, limit: int, before_id: int | None) -> Plan[list[int]]:
    """The ids of ``list_jobs``' page, without reading the rows' columns."""
    rows = yield from _listed(f, limit, before_id, None, "id")
    return [int(r[0]) for r in rows]


def _listed(
    f: JobFilter, limit: int, before_id: int | None, after_id: int | None, cols: str
) -> Plan[list[Any]]:
    merged = kind_page(f, FILTER_SQL, cols, limit, before_id, after_id)
    if merged is not None:  # a kind's ranges, one a state (see _listing)
        out = yield one(merged[0], *merged[1])
        return list(out[0].rows)
    sql, params = page(f, FILTER_SQL, cols, before_id, after_id)
    out = yield one(sql, *params, limit)
    return list(out[0].rows)


def count(f: JobFilter) -> Plan[int]:
    cond, params = where(f)
    out = yield one(f"SELECT COUNT(*) FROM kiln_jobs WHERE {cond}", *params)
    return int(out[0].rows[0][0])


ID_SUMS = sums_sql("MOD({}, {})")


def id_sums(f: JobFilter) -> Plan[tuple[int, int, int, int, int]]:
    """What kiln._model._idset fingerprints, summed in one statement."""
    cond, params = where(f)
    out = yield one(f"SELECT {ID_SUMS} FROM kiln_jobs WHERE {cond}", *params)
    row = out[0].rows[0]
    return int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4])


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
        Stmt(f"SELECT id, unique_key, conc_key, kind FROM kiln_jobs WHERE {cond} AND {NOT_HELD}"
             f" AND {ATTEMPT_OVER} ORDER BY id FOR UPDATE", (*params, micros(dead_after))),
        begin=True,
    )
    newest: dict[str, int] = {}  # of the jobs of one key that would go back, the newest
    ids: list[int] = []
    kinds: dict[int, tuple[str, str]] = {}  # a job's concurrency key and kind
    for job_id, key, conc_key, kind in out[0].rows:
        if conc_key is not None:
            kinds[int(job_id)] = (str(conc_key), str(kind))
        if key is None:
            ids.append(int(job_id))
        else:
            newest[key] = int(job_id)  # rows come in id order
    ids = sorted([*ids, *newest.values()])
    back = dict(kinds[i] for i in ids if i in kinds)
    if back:  # the rows of their keys, which the pruner may have deleted
        yield step(keys_back_stmt(back))
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


def admit_lifted(f: JobFilter, retries_only: bool) -> Plan[int]:
    """Make matching pending jobs available now, their rate limits lifted: no token is
    taken, the admission is recorded (kiln.testing's drain); ``retries_only``: only the
    jobs that ran before (attempt > 0)."""
    cond, params = where(f, ("pending",))
    if retries_only:
        cond = f"({cond}) AND attempt > 0"
    out = yield step(Stmt(
        f"UPDATE kiln_jobs SET state = 'available', run_at = {NOW}, admitted_at = {NOW}"
        f" WHERE {cond}", params), last=True)
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


def state_counts(
    states: Sequence[JobState] | None = None, cap: int | None = None
) -> Plan[list[StateCount]]:
    """Every state's counts, or ``states``' only: a range of kiln_jobs_claim (state,
    queue, ...) per state asked for, so the live states never read the finished jobs.
    With ``cap``: exact up to it a queue and state, estimated above (_counts)."""
    if cap is not None:
        return (yield from _counts.state_counts(states, cap))
    where = ""
    if states is not None:
        names = sorted({JobState(s).value for s in states})
        if not names:
            return []
        where = f" WHERE state IN ({', '.join(repr(n) for n in names)})"
    out = yield one(f"SELECT queue, state, COUNT(*) FROM kiln_jobs{where} GROUP BY state, queue")
    return [StateCount(queue=r[0], state=JobState(r[1]), count=int(r[2])) for r in out[0].rows]


# the oldest run_at of each (queue, conc_key, priority) group of kiln_jobs_claim (state,
# queue, conc_key, priority, run_at, id), then each queue's oldest of those: grouped by
# the index's leading columns, MIN(run_at) is the first entry of each group, one
# descent a group ("Using index for group-by"). GROUP BY queue alone read every available
# job's entry (773 ms every 15 s with 1,500,000 available; test_mysql_maintenance_plans.py)
OLDEST = (
    f"SELECT queue, GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(first), {NOW}), 0)"
    " FROM (SELECT queue, MIN(run_at) AS first FROM kiln_jobs WHERE state = 'available'"
    " GROUP BY state, queue, conc_key, priority) g GROUP BY queue"
)


def oldest_available() -> Plan[dict[str, float]]:
    out = yield one(OLDEST)
    return {r[0]: int(r[1]) / 1_000_000 for r in out[0].rows}


def scheduled_due() -> Plan[dict[str, int]]:
    # the due end of kiln_jobs_due (state, run_at)
    out = yield one(f"SELECT queue, COUNT(*) FROM kiln_jobs WHERE state = 'scheduled'"
                    f" AND run_at <= {NOW} GROUP BY queue")
    return {r[0]: int(r[1]) for r in out[0].rows}


def counts_by_kind() -> Plan[list[tuple[str, JobState, int]]]:
    out = yield one("SELECT kind, state, COUNT(*) FROM kiln_jobs GROUP BY kind, state")
    return [(r[0], JobState(r[1]), int(r[2])) for r in out[0].rows]


# exact up to ``cap`` a kind and state, estimated above (_counts)
kind_counts = _counts.kind_counts


def available_by_kind(cap: int | None = None) -> Plan[list[tuple[str, str, int]]]:
    if cap is not None:  # exact up to cap a kind, estimated above (_counts)
        return (yield from _counts.available_by_kind(cap))
    out = yield one("SELECT queue, kind, COUNT(*) FROM kiln_jobs WHERE state = 'available'"
                    " GROUP BY queue, kind")
    return [(str(r[0]), str(r[1]), int(r[2])) for r in out[0].rows]


def error_groups(f: JobFilter, limit: int, scan: int) -> Plan[list[tuple[str, int, int]]]:
    """(last error, jobs, highest id) of the newest ``scan`` failed jobs under ``f``,
    the most common first."""
    cond, params = where(f, ("failed",))
    out = yield one(
        f"SELECT e, COUNT(*), MAX(id) FROM (SELECT id, {LAST_ERROR} AS e FROM kiln_jobs"
        f" WHERE {cond} AND state = 'failed' AND finished_at IS NOT NULL"
        " ORDER BY finished_at DESC LIMIT %s) t"
        " GROUP BY e ORDER BY COUNT(*) DESC, MAX(id) DESC LIMIT %s",
        *params, scan, limit,
    )
    return [(r[0] or "", int(r[1]), int(r[2])) for r in out[0].rows]


def running_by_server() -> Plan[list[tuple[str, str, int]]]:
    out = yield one("SELECT queue, COALESCE(server_id, ''), COUNT(*) FROM kiln_jobs"
                    " WHERE state = 'running' GROUP BY queue, server_id")
    return [(r[0], r[1], int(r[2])) for r in out[0].rows]
