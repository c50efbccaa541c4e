"""PostgreSQL plans for admin: a filter's WHERE clause, reading and listing jobs, counts
and series for the dashboard, and the bulk actions (requeue, make due, delete).

The filter's shape and the states each action may touch are kiln.stores._filters';
this module gives PostgreSQL's pieces. Owns these statements; the store runs the plans
(see _plan).
"""

from __future__ import annotations

import dataclasses
import json
import re
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
    keyset,
    page,
)
from kiln.stores._rows import BRIEF_BYTES, CUT, brief_cols, dumps, uncut
from kiln.stores.postgres import _counts
from kiln.stores.postgres._counts import capped_available_by_kind, capped_counts
from kiln.stores.postgres._finished import (
    completed_series_by_queue as completed_series_by_queue,
)
from kiln.stores.postgres._finished import finished_series as finished_series
from kiln.stores.postgres._finished import throughput as throughput
from kiln.stores.postgres._insert import NOTIFIED, notify_from
from kiln.stores.postgres._jobs import COLUMNS, JOB_COLS, NOT_HELD, release_stmts, row_to_job
from kiln.stores.postgres._kind_counts import kind_counts as kind_counts
from kiln.stores.postgres._plan import Plan, Stmt, one, step
from kiln.stores.postgres._rollup import timings as timings

# the error messages only, not the JSON around them (keys, timestamps, tracebacks)
ERROR_MATCH = (
    "EXISTS (SELECT 1 FROM jsonb_array_elements(errors) e WHERE lower(e->>'error') LIKE %s)"
)

JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')  # what JSON text writes escaped


def error_clauses(text: str) -> tuple[list[str], list[Any]]:
    pattern = "%" + like_escape(text.lower()) + "%"
    if JSON_ESCAPED.search(text):
        return [ERROR_MATCH], [pattern]
    # the text appears as it is in the errors' JSON too, so the trigram index over it
    # (migration 0003) narrows the candidates first
    return ["lower(errors::text) LIKE %s", ERROR_MATCH], [pattern, pattern]


def any_of(column: str, values: Sequence[Any], sql_type: str) -> tuple[list[str], list[Any]]:
    return [f"{column} = ANY(%s::{sql_type}[])"], [list(values)]


def tag_clauses(f: JobFilter) -> tuple[list[str], list[Any]]:
    """All of the tags, and metadata / args keys equal to values. Containment (@>) lets
    the partial GIN indexes of migration 0007 answer (their predicates are repeated here
    for the planner); the key equalities then make it exact: containment would also
    match a key whose value is an array holding the value."""
    clauses: list[str] = []
    params: list[Any] = []
    if f.tags:
        clauses.append("tags <> '{}' AND tags @> %s::text[]")
        params.append(list(f.tags))
    for column, pairs in (("metadata", f.metadata), ("args", f.args)):
        if not pairs:
            continue
        if column == "metadata":
            clauses.append("metadata <> '{}'")
        clauses.append(f"{column} @> %s::jsonb")
        params.append(dumps(dict(pairs)))
        for key, value in pairs.items():
            clauses.append(f"{column} -> %s = %s::jsonb")
            params.extend((key, dumps(value)))
    return clauses, params


LAST_ERROR = "(errors->-1->>'error')"  # the last attempt's error message


FILTER_SQL = FilterSql(
    mark="%s",
    true="true",
    member=any_of,
    errors=error_clauses,
    last_error=lambda text: ([f"{LAST_ERROR} = %s"], [text]),
    tagged=tag_clauses,
    when=lambda at: at,
)


def where(f: JobFilter, allowed: Sequence[str] | None = None) -> tuple[str, list[Any]]:
    return compile_filter(f, FILTER_SQL, allowed)


GET = (
    f"SELECT {JOB_COLS}, ARRAY(SELECT dep_id FROM kiln_job_deps d"
    " WHERE d.job_id = kiln_jobs.id ORDER BY dep_id), result::text FROM kiln_jobs WHERE id = %s"
)


def get(job_id: int) -> Plan[JobRow | None]:
    rows = (yield one(GET, job_id))[0]
    if not rows:
        return None
    job = row_to_job(rows[0], list(rows[0][-2]))
    stored = rows[0][-1]
    job.result = None if stored is None else json.loads(stored)
    return job


DEPENDENCY_RESULTS = (
    "SELECT d.dep_id, j.result::text FROM kiln_job_deps d JOIN kiln_jobs j ON j.id = d.dep_id"
    " WHERE d.job_id = %s ORDER BY d.dep_id"
)


def dependency_results(job_id: int) -> Plan[dict[int, Any]]:
    rows = (yield one(DEPENDENCY_RESULTS, job_id))[0]
    return {int(r[0]): None if r[1] is None else json.loads(r[1]) for r in rows}


PROBE_WINDOW = 5000  # newest rows a tag / metadata listing looks at first


def list_stmt(
    f: JobFilter, limit: int, before_id: int | None, after_id: int | None = None,
    cols: str = JOB_COLS,
) -> Stmt:
    """Newest first below ``before_id``; oldest first above ``after_id`` when given."""
    sql, params = page(f, FILTER_SQL, cols, before_id, after_id)
    return Stmt(sql, (*params, limit))


def tagged_list_stmts(
    f: JobFilter, limit: int, before_id: int | None, after_id: int | None = None,
    cols: str = JOB_COLS,
) -> tuple[Stmt, Stmt]:
    """A listing filtered by tags or metadata (and maybe args), in two statements: the
    planner cannot tell a common tag from a rare one (a tag outside its sample is
    estimated as common as the rarest one it saw): walking the id index in page order
    is right for a common tag and reads the whole table for a rare one; the GIN index
    is right for a rare tag and reads every match of a common one before sorting.

    The probe filters the ``PROBE_WINDOW`` first jobs (in page order) the other
    conditions select: a filter matching one job in a hundred or more fills its page
    there. When it does not, the matches are rare, and the second statement finds them
    through the GIN indexes (its ``id + 0`` order keeps the planner off the id walk;
    tests/stores/test_postgres_tag_plans.py checks its plan)."""
    plain = dataclasses.replace(f, tags=(), metadata={}, args={})
    base, base_params = where(plain)
    tagged, tag_params = tag_clauses(f)
    base, order = keyset(base, base_params, before_id, after_id, "%s")
    probe = (
        f"SELECT {cols} FROM (SELECT * FROM kiln_jobs WHERE {base} ORDER BY id {order}"
        f" LIMIT {PROBE_WINDOW}) AS recent WHERE {' AND '.join(tagged)}"
        f" ORDER BY id {order} LIMIT %s"
    )
    full = list_stmt(f, limit, before_id, after_id, cols)
    rare = full.sql.replace(f"ORDER BY id {order} LIMIT %s", f"ORDER BY id + 0 {order} LIMIT %s")
    return Stmt(probe, (*base_params, *tag_params, limit)), Stmt(rare, full.params)


# a jsonb value stored uncompressed in at most this many bytes is under BRIEF_BYTES as
# text (its text is at most 6 times its size: an escaped control character), so it is
# sent as it is without measuring it: most values, and no subquery for them
SMALL_JSONB = BRIEF_BYTES // 6


def _brief(column: str) -> str:
    """A JSON column as text, or over BRIEF_BYTES its size and stand-in (see _rows.CUT);
    the text of a larger value is made once (OFFSET 0 keeps the planner from inlining it
    thrice)."""
    stand = (f"'[' || (({column} -> -1) - 'traceback')::text || ']'" if column == "errors"
             else "'null'")
    return (f"CASE WHEN pg_column_size({column}) <= {SMALL_JSONB}"
            f" AND pg_column_compression({column}) IS NULL THEN {column}::text ELSE"
            f" (SELECT CASE WHEN octet_length(x) > {BRIEF_BYTES} THEN '{CUT}'"
            f" || octet_length(x) || ':' || {stand} ELSE x END"
            f" FROM (SELECT {column}::text AS x OFFSET 0) AS s) END AS {column}")


BRIEF_COLS = brief_cols(COLUMNS, _brief)


def list_jobs(
    f: JobFilter, limit: int, before_id: int | None, after_id: int | None = None,
    brief: bool = False,
) -> Plan[list[JobRow]]:
    rows = yield from _listed(f, limit, before_id, after_id, BRIEF_COLS if brief else JOB_COLS)
    if not brief:
        return [row_to_job(r) for r in rows]
    jobs = []
    for r in rows:
        values, cut = uncut(dict(zip(COLUMNS, r, strict=True)))
        job = row_to_job([values[c] for c in COLUMNS])
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
    if f.tags or f.metadata:  # indexed; an args filter alone has no index to turn to
        probe, rare = tagged_list_stmts(f, limit, before_id, after_id, cols)
        rows = (yield one(probe.sql, *probe.params))[0]
        if len(rows) < limit:
            rows = (yield one(rare.sql, *rare.params))[0]
        return list(rows)
    stmt = list_stmt(f, limit, before_id, after_id, cols)
    return list((yield one(stmt.sql, *stmt.params))[0])


def count_stmt(f: JobFilter) -> Stmt:
    cond, params = where(f)
    return Stmt(f"SELECT count(*) FROM kiln_jobs WHERE {cond}", tuple(params))


def count(f: JobFilter) -> Plan[int]:
    stmt = count_stmt(f)
    rows = (yield one(stmt.sql, *stmt.params))[0]
    return int(rows[0][0])


ID_SUMS = sums_sql("mod({}, {})")


def id_sums(f: JobFilter) -> Plan[tuple[int, int, int, int, int]]:
    """What kiln._model._idset fingerprints, summed in one statement."""
    cond, params = where(f)
    row = (yield one(f"SELECT {ID_SUMS} FROM kiln_jobs WHERE {cond}", *params))[0][0]
    return int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4])


UNMET = (
    "EXISTS (SELECT 1 FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
    " WHERE d.job_id = kiln_jobs.id AND o.state <> 'completed')"
)


# a job cancelled while running waits until that attempt ended or its server is dead
ATTEMPT_OVER = (
    "NOT (attempt_running AND server_id IN (SELECT id FROM kiln_servers"
    " WHERE heartbeat_at > now() - %s * interval '1 second'))"
)


# A requeued job with a concurrency key needs its key's row, which the pruner may have
# deleted once the job finished (_concurrency.PRUNE_LOCK): the rows of the keys of the
# jobs put back are held FOR KEY SHARE as an enqueue holds them, and a missing one is
# written again with the max of the kind's newest published declaration (1, the
# safe side, without one; the next enqueue of the key, or the kind's server as it
# starts, sets the declared max).
KEYS_BACK = (
    " ck AS (SELECT DISTINCT conc_key, kind FROM upd WHERE conc_key IS NOT NULL),"
    " held AS (SELECT c.conc_key FROM kiln_concurrency_keys c WHERE c.conc_key IN"
    " (SELECT conc_key FROM ck) ORDER BY c.conc_key FOR KEY SHARE OF c),"
    " keyed AS (INSERT INTO kiln_concurrency_keys (conc_key, max)"
    " SELECT DISTINCT ON (ck.conc_key) ck.conc_key, coalesce((SELECT"
    " (d.options->'concurrency'->>'max')::int FROM kiln_kinds d WHERE d.kind = ck.kind"
    " ORDER BY d.published_at DESC LIMIT 1), 1) FROM ck"
    " WHERE ck.conc_key NOT IN (SELECT conc_key FROM held) ORDER BY ck.conc_key"
    " ON CONFLICT (conc_key) DO UPDATE SET max = kiln_concurrency_keys.max RETURNING 1)"
)


def requeue(f: JobFilter, dead_after: float) -> Plan[int]:
    cond, params = where(f, REQUEUEABLE)
    movable = f"{cond} AND {NOT_HELD} AND {ATTEMPT_OVER}"
    sql = (
        f"WITH upd AS (UPDATE kiln_jobs SET state = CASE WHEN {UNMET} THEN 'awaiting'"
        " WHEN rate_key IS NULL THEN 'available' ELSE 'pending' END,"
        " attempt = 0, rescues = 0, run_at = now(), finished_at = NULL, server_id = NULL,"
        " attempt_running = false, result = NULL"
        f" WHERE {movable} AND (unique_key IS NULL OR id IN"
        # of the jobs of one key that would go back, only the newest does
        f" (SELECT max(id) FROM kiln_jobs WHERE unique_key IS NOT NULL AND {movable}"
        " GROUP BY unique_key)) RETURNING queue, state, run_at, conc_key, kind),"
        f"{KEYS_BACK}{notify_from('upd')} SELECT count(*) FROM upd WHERE {NOTIFIED}"
    )
    rows = (yield one(sql, *params, dead_after, *params, dead_after))[0]
    return int(rows[0][0])


def make_due(f: JobFilter) -> Plan[int]:
    """Bring the run_at of matching scheduled and pending jobs forward to now."""
    cond, params = where(f, MAKE_DUE)
    sql = (
        f"WITH upd AS (UPDATE kiln_jobs SET run_at = now() WHERE {cond} AND run_at > now()"
        " RETURNING 1) SELECT count(*) FROM upd"
    )
    rows = (yield one(sql, *params))[0]
    return int(rows[0][0])


def admit_lifted(f: JobFilter, retries_only: bool) -> Plan[int]:
    """Make matching pending jobs available now, their rate limits lifted: no token is
    taken, the admission is recorded (kiln.testing's drain); ``retries_only``: only the
    jobs that ran before (attempt > 0)."""
    cond, params = where(f, ("pending",))
    if retries_only:
        cond = f"({cond}) AND attempt > 0"
    sql = (
        "WITH upd AS (UPDATE kiln_jobs SET state = 'available', run_at = now(),"
        f" admitted_at = now() WHERE {cond} RETURNING 1) SELECT count(*) FROM upd"
    )
    rows = (yield one(sql, *params))[0]
    return int(rows[0][0])


DELETE_EDGES = "DELETE FROM kiln_job_deps WHERE dep_id = ANY(%s::bigint[])"


def delete(f: JobFilter) -> Plan[int]:
    """Delete, then release what waited only on the deleted jobs."""
    cond, params = where(f, DELETABLE)
    sql = (
        f"WITH del AS (DELETE FROM kiln_jobs WHERE {cond} RETURNING id),"
        " edges AS (DELETE FROM kiln_job_deps WHERE job_id IN (SELECT id FROM del))"
        " SELECT id FROM del"
    )
    rows = (yield step(Stmt(sql, tuple(params))))[0]
    ids = sorted(int(r[0]) for r in rows)
    if ids:
        yield step(*release_stmts(ids), Stmt(DELETE_EDGES, (ids,)), last=True)
    return len(ids)


def dependents(job_id: int) -> Plan[list[int]]:
    sql = "SELECT job_id FROM kiln_job_deps WHERE dep_id = %s ORDER BY job_id"
    rows = (yield one(sql, job_id))[0]
    return [int(r[0]) for r in rows]


# the available jobs by queue, as two halves that each read one partial index: the
# plain ones (kiln_jobs_claim) and the limited ones (kiln_jobs_conc_available)
AVAILABLE_PARTS = (
    "SELECT queue, {agg} AS n FROM kiln_jobs WHERE state = 'available' AND conc_key IS NULL"
    " GROUP BY queue UNION ALL SELECT queue, {agg} FROM kiln_jobs WHERE state = 'available'"
    " AND conc_key IS NOT NULL GROUP BY queue"
)


AVAILABLE_COUNTS = (
    f"SELECT queue, 'available', sum(n) FROM ({AVAILABLE_PARTS.format(agg='count(*)')})"
    " AS a GROUP BY queue"
)


def state_counts(
    states: Sequence[JobState] | None = None, cap: int | None = None
) -> Plan[list[StateCount]]:
    """Every state's counts, or ``states``' only. In parts, so each can use its partial
    index: available through the claim indexes (plain, limited), the others through
    kiln_jobs_state_queue (state, queue, id), one index range per state asked for: the
    live states' counts never walk the completed jobs (500,000 of them cost a 116 to
    195 ms scan of the table every counts_ttl). With ``cap``: exact up to it per queue
    and state, estimated above (_counts), at a cost that does not grow with the table."""
    if cap is not None:
        return (yield from capped_counts(states, cap))
    if states is None:
        others = "state <> 'available'"
        want_available = True
    else:
        names = sorted({JobState(s).value for s in states} - {"available"})
        # literal states (JobState values), so the plan is the same at every refresh
        others = (f"state IN ({', '.join(repr(n) for n in names)}) AND state <> 'available'"
                  if names else "")
        want_available = JobState.AVAILABLE in states
    parts = [AVAILABLE_COUNTS] if want_available else []
    if others:
        parts.append(f"SELECT queue, state, count(*) FROM kiln_jobs WHERE {others}"
                     " GROUP BY queue, state")
    if not parts:
        return []
    rows = (yield one(" UNION ALL ".join(parts), prepare=True))[0]
    return [StateCount(queue=r[0], state=JobState(r[1]), count=int(r[2])) for r in rows]


# per queue, the age of its oldest available job: a loose scan of the claim indexes
# (_counts.OLDEST), no longer a min() over every available job (1.9 s at 10M waiting)
oldest_available = _counts.oldest_available


def scheduled_due() -> Plan[dict[str, int]]:
    # the due end of kiln_jobs_scheduled (run_at, partial: scheduled jobs only)
    sql = ("SELECT queue, count(*) FROM kiln_jobs WHERE state = 'scheduled' AND run_at <= now()"
           " GROUP BY queue")
    rows = (yield one(sql, prepare=True))[0]
    return {r[0]: int(r[1]) for r in rows}


def counts_by_kind() -> Plan[list[tuple[str, JobState, int]]]:
    rows = (yield one("SELECT kind, state, count(*) FROM kiln_jobs GROUP BY kind, state"))[0]
    return [(r[0], JobState(r[1]), int(r[2])) for r in rows]


def available_by_kind(cap: int | None = None) -> Plan[list[tuple[str, str, int]]]:
    if cap is not None:  # exact up to cap a pair, estimated above (_counts)
        return (yield from capped_available_by_kind(cap))
    sql = (  # in parts, as state_counts: the plain ones read kiln_jobs_claim alone
        "SELECT queue, kind, sum(n) FROM (SELECT queue, kind, count(*) AS n FROM kiln_jobs"
        " WHERE state = 'available' AND conc_key IS NULL GROUP BY queue, kind UNION ALL"
        " SELECT queue, kind, count(*) FROM kiln_jobs WHERE state = 'available'"
        " AND conc_key IS NOT NULL GROUP BY queue, kind) AS a GROUP BY queue, kind"
    )
    rows = (yield one(sql, prepare=True))[0]
    return [(str(r[0]), str(r[1]), int(r[2])) for r in rows]


def error_groups(f: JobFilter, limit: int, scan: int) -> Plan[list[tuple[str, int, int]]]:
    """(last error, jobs, highest id) of the newest ``scan`` failed jobs under ``f``
    (by finished_at: the kiln_jobs_finished index), the most common first."""
    cond, params = where(f, ("failed",))
    sql = (
        f"SELECT e, count(*), max(id) FROM (SELECT id, {LAST_ERROR} AS e FROM kiln_jobs"
        f" WHERE {cond} AND state = 'failed' AND finished_at IS NOT NULL"
        " ORDER BY finished_at DESC LIMIT %s) t"
        " GROUP BY e ORDER BY count(*) DESC, max(id) DESC LIMIT %s"
    )
    rows = (yield one(sql, *params, scan, limit))[0]
    return [(r[0] or "", int(r[1]), int(r[2])) for r in rows]


def running_by_server() -> Plan[list[tuple[str, str, int]]]:
    sql = ("SELECT queue, coalesce(server_id, ''), count(*) FROM kiln_jobs"
           " WHERE state = 'running' GROUP BY queue, server_id")
    rows = (yield one(sql))[0]
    return [(r[0], r[1], int(r[2])) for r in rows]


def like_escape(text: str) -> str:
    """Escape LIKE's wildcards (backslash is PostgreSQL's default escape)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
