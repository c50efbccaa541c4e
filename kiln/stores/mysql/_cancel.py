"""MySQL/MariaDB plans for cancelling jobs, running ones included.

Owns the cancel statements, which record who cancelled, and the read by which a server
learns which of its running jobs were cancelled. MySQL has no notifications: the
client wakes the servers through a Bus, or they look once per heartbeat_interval.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln._model._job import CancelRequest, JobFilter
from kiln.stores._filters import CANCELLABLE
from kiln.stores.mysql._admin import NOT_HELD, chunks, where
from kiln.stores.mysql._columns import NOW
from kiln.stores.mysql._plan import Plan, Stmt, marks, one, step

EPOCH = f"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {NOW}) / 1000000"
# the record of who cancelled, in the shape of an AttemptError (kiln._model._job)
RECORD = (
    f"JSON_OBJECT('attempt', attempt, 'at', {EPOCH}, 'error', %s, 'traceback', '',"
    " 'server_id', IF(state = 'running', server_id, NULL))"
)


def cancel(f: JobFilter, actor: str | None) -> Plan[int]:
    cond, params = where(f, CANCELLABLE)
    out = yield step(
        Stmt(f"SELECT id FROM kiln_jobs WHERE {cond} AND {NOT_HELD} ORDER BY id FOR UPDATE",
             params),
        begin=True,
    )
    ids = [int(r[0]) for r in out[0].rows]
    record = "" if actor is None else f"errors = JSON_ARRAY_APPEND(errors, '$', {RECORD}), "
    message = () if actor is None else (f"Cancelled by {actor}",)
    for part in chunks(ids):
        yield step(Stmt(
            # before state changes: MySQL applies SETs left to right
            f"UPDATE kiln_jobs SET {record}attempt_running = (state = 'running'),"
            f" state = 'cancelled', finished_at = {NOW} WHERE id IN ({marks(len(part))})",
            (*message, *part),
        ))
    return len(ids)


def cancel_requested(job_ids: Sequence[int]) -> Plan[list[CancelRequest]]:
    out = yield one(
        "SELECT id, attempt, server_id,"
        f" GREATEST(TIMESTAMPDIFF(MICROSECOND, finished_at, {NOW}), 0) FROM kiln_jobs"
        f" WHERE id IN ({marks(len(job_ids))}) AND state = 'cancelled' AND attempt_running",
        *job_ids,
    )
    return [CancelRequest(int(r[0]), int(r[1]), r[2], int(r[3]) / 1e6) for r in out[0].rows]
