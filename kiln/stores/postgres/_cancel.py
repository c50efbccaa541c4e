"""PostgreSQL plans for cancelling jobs, running ones included.

Owns the cancel statement, which records who cancelled and wakes the servers of the
running jobs it cancelled (one NOTIFY of CANCEL_PAYLOAD), and the read by which a
server learns which of its running jobs were cancelled.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln._model._job import CancelRequest, JobFilter
from kiln._model._wakeup import CANCEL_PAYLOAD, CHANNEL
from kiln.stores._filters import CANCELLABLE
from kiln.stores.postgres._admin import where
from kiln.stores.postgres._plan import Plan, one

# the record of who cancelled, in the shape of an AttemptError (kiln._model._job); column
# references on the right of SET read the row before the update
RECORD = (
    "jsonb_build_object('attempt', attempt, 'at', extract(epoch FROM now())::float8,"
    " 'error', %s::text, 'traceback', '', 'server_id',"
    " CASE WHEN state = 'running' THEN server_id END)"
)


def cancel(f: JobFilter, actor: str | None) -> Plan[int]:
    cond, params = where(f, CANCELLABLE)
    message = None if actor is None else f"Cancelled by {actor}"
    sql = (
        "WITH upd AS (UPDATE kiln_jobs SET state = 'cancelled', finished_at = now(),"
        " attempt_running = (state = 'running'), errors = CASE WHEN %s::text IS NULL"
        f" THEN errors ELSE errors || jsonb_build_array({RECORD}) END"
        f" WHERE {cond} RETURNING attempt_running),"
        f" kiln_notify AS (SELECT pg_notify('{CHANNEL}', %s) FROM"
        " (SELECT 1 FROM upd WHERE attempt_running LIMIT 1) AS running)"
        " SELECT count(*), (SELECT count(*) FROM kiln_notify) FROM upd"
    )
    rows = (yield one(sql, message, message, *params, CANCEL_PAYLOAD))[0]
    return int(rows[0][0])


CANCEL_REQUESTED = (
    "SELECT id, attempt, server_id, extract(epoch FROM now() - finished_at)::float8"
    " FROM kiln_jobs WHERE id = ANY(%s::bigint[]) AND state = 'cancelled'"
    " AND attempt_running"
)


def cancel_requested(job_ids: Sequence[int]) -> Plan[list[CancelRequest]]:
    rows = (yield one(CANCEL_REQUESTED, list(job_ids)))[0]
    return [CancelRequest(int(r[0]), int(r[1]), r[2], max(float(r[3]), 0.0)) for r in rows]
