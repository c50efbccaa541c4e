"""MySQL/MariaDB: the vocabulary every statement module of the dialect shares: the job
columns and how a row becomes a JobRow, the database clock, the insert's VALUES, the
rate-limit key declaration, and the predicates of a paused or limited queue. A leaf: it
imports no other statement module of the dialect.
"""

from __future__ import annotations

from typing import Any

from kiln._model._job import JobRow, JobState, NewJob
from kiln.stores._rows import args_text, dumps, errors_from, loads
from kiln.stores.mysql._plan import Row, Stmt, from_db, from_db_required, micros, to_db

COLUMNS = (
    "id", "queue", "kind", "state", "args", "params", "metadata", "priority", "run_at",
    "attempt", "max_attempts", "timeout", "backoff", "errors", "created_at", "admitted_at",
    "attempted_at", "finished_at", "server_id", "rate_key", "rescues", "tags", "conc_key",
)


JOB_COLS = ", ".join(COLUMNS)


J_COLS = ", ".join(f"j.{c}" for c in COLUMNS)


NOW = "UTC_TIMESTAMP(6)"


FINISHED = ("completed", "failed", "cancelled")


def row_to_job(row: Row, depends_on: list[int] | None = None) -> JobRow:
    return JobRow(
        id=int(row[0]), queue=row[1], kind=row[2], state=JobState(row[3]), args=loads(row[4]),
        params=loads(row[5]) or {}, metadata=loads(row[6]) or {}, priority=row[7],
        run_at=from_db_required(row[8]), attempt=row[9], max_attempts=row[10],
        timeout=row[11], backoff=loads(row[12]), errors=errors_from(row[13]),
        created_at=from_db_required(row[14]), admitted_at=from_db(row[15]),
        attempted_at=from_db(row[16]), finished_at=from_db(row[17]), server_id=row[18],
        rate_key=row[19], rescues=row[20], depends_on=depends_on or [],
        tags=loads(row[21]) if row[21] else [], conc_key=row[22],
    )


# insert ------------------------------------------------------------------------------
_RUN_AT = f"COALESCE(%s, {NOW} + INTERVAL %s MICROSECOND)"


VALUES = (
    f"(%s, %s, CASE WHEN %s THEN 'awaiting' WHEN %s IS NOT NULL THEN 'pending'"
    f" WHEN {_RUN_AT} > {NOW} THEN 'scheduled' ELSE 'available' END,"
    f" %s, '{{}}', %s, %s, {_RUN_AT}, %s, %s, %s, '[]', {NOW}, %s, %s, %s, %s)"
)


INSERT = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, priority, run_at,"
    " max_attempts, timeout, backoff, errors, created_at, rate_key, tags, conc_key,"
    " defaulted) VALUES "
)


RATE_LIMIT_DECLARE = (
    "INSERT INTO kiln_rate_limits (`key`, rate, per, burst, tokens, updated_at, changed_at)"
    " VALUES {rows} ON DUPLICATE KEY UPDATE"  # changed_at first: it reads the old values
    " changed_at = IF(rate <> VALUES(rate) OR per <> VALUES(per) OR burst <> VALUES(burst),"
    " VALUES(changed_at), changed_at),"
    " rate = VALUES(rate), per = VALUES(per), burst = VALUES(burst)"
)


def insert_values(job: NewJob, unmet: bool) -> list[Any]:
    run_at = None if job.run_at is None else to_db(job.run_at)
    delay = micros(max(job.delay, 0.0))
    return [
        job.queue, job.kind, unmet, job.rate_key, run_at, delay, args_text(job),
        dumps(job.metadata) if job.metadata else "{}", job.priority, run_at, delay,
        job.max_attempts, job.timeout, None if job.backoff is None else dumps(job.backoff),
        job.rate_key, dumps(list(job.tags)) if job.tags else None, job.conc_key,
        job.defaulted,
    ]


def rate_limit_stmt(limits: dict[str, Any]) -> Stmt:
    keys = sorted(limits)  # one lock order for every caller
    params: list[Any] = []
    for k in keys:
        lim = limits[k]
        params.extend((k, lim.rate, lim.per, lim.burst, float(max(lim.burst, 1))))
    rows = ", ".join([f"(%s, %s, %s, %s, %s, {NOW}, {NOW})"] * len(keys))
    return Stmt(RATE_LIMIT_DECLARE.format(rows=rows), params)


# claim -------------------------------------------------------------------------------
# a paused queue's jobs are not claimed (kiln._model._controls); an index lookup in a tiny table
UNPAUSED = (
    "NOT EXISTS (SELECT 1 FROM kiln_queue_pauses p WHERE p.queue IN (kiln_jobs.queue, '*'))"
)


# a queue with a limit of its own is claimed through _concurrency, under its row's lock
UNLIMITED = (
    "NOT EXISTS (SELECT 1 FROM kiln_concurrency_keys c"
    " WHERE c.conc_key = CONCAT('queue:', kiln_jobs.queue))"
)
