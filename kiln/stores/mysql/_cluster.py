"""MySQL/MariaDB plans for the cluster: servers, the leader lease, rescue, sweep,
prune, recurring-job slots and the audit log (rate limits are in _rates).

Owns these statements only. Every age and deadline is computed against the database
clock (``UTC_TIMESTAMP(6)``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kiln._model._job import (
    AuditEntry,
    AuditQuery,
    JobState,
    NewJob,
    RescueCandidate,
    RunningJob,
    ServerInfo,
)
from kiln.stores._audit_sql import audit_where
from kiln.stores._rows import dumps, loads
from kiln.stores.mysql import _rollup as _rollup_sql
from kiln.stores.mysql._admin import remove
from kiln.stores.mysql._columns import J_COLS, NOW, row_to_job
from kiln.stores.mysql._jobs import insert, release_dependents
from kiln.stores.mysql._plan import (
    Plan,
    Stmt,
    from_db,
    from_db_required,
    marks,
    micros,
    one,
    step,
    to_db,
)


# servers and leader ------------------------------------------------------------------
def server_register(info: ServerInfo) -> Plan[None]:
    yield one(
        "REPLACE INTO kiln_servers (id, host, pid, queues, kinds, version, started_at,"
        f" heartbeat_at) VALUES (%s, %s, %s, %s, %s, %s, %s, {NOW})",
        info.id, info.host, info.pid, dumps(info.queues), dumps(info.kinds), info.version,
        to_db(info.started_at),
    )


def server_heartbeat(server_id: str, connections: int | None = None) -> Plan[bool]:
    # heartbeat_at always moves (microseconds), so "changed rows" is "matched rows"
    out = yield one(f"UPDATE kiln_servers SET heartbeat_at = {NOW},"
                    " connections = COALESCE(%s, connections) WHERE id = %s",
                    connections, server_id)
    return out[0].rowcount == 1


def server_deregister(server_id: str) -> Plan[None]:
    yield step(
        Stmt("DELETE FROM kiln_servers WHERE id = %s", (server_id,)),
        Stmt("DELETE FROM kiln_leader WHERE server_id = %s", (server_id,)),
        begin=True, last=True,
    )


def server_list() -> Plan[list[ServerInfo]]:
    out = yield one(
        "SELECT id, host, pid, queues, kinds, version, started_at, heartbeat_at,"
        f" GREATEST(TIMESTAMPDIFF(MICROSECOND, heartbeat_at, {NOW}), 0), connections"
        " FROM kiln_servers ORDER BY started_at"
    )
    return [
        ServerInfo(
            id=r[0], host=r[1], pid=r[2], queues=loads(r[3]), kinds=loads(r[4]), version=r[5],
            started_at=from_db_required(r[6]), heartbeat_at=from_db(r[7]),
            heartbeat_age=int(r[8]) / 1_000_000, connections=r[9],
        )
        for r in out[0].rows
    ]


def leader_elect(server_id: str, ttl: float) -> Plan[bool]:
    # ON DUPLICATE KEY UPDATE assigns left to right and later expressions see earlier
    # assignments: server_id changes first (kept, or taken over from an expired lease),
    # then the lease is extended only if it is now ours.
    out = yield step(
        Stmt(
            "INSERT INTO kiln_leader (name, server_id, expires_at)"
            f" VALUES ('default', %s, {NOW} + INTERVAL %s MICROSECOND)"
            " ON DUPLICATE KEY UPDATE"
            f" server_id = IF(server_id = VALUES(server_id) OR expires_at < {NOW},"
            " VALUES(server_id), server_id),"
            " expires_at = IF(server_id = VALUES(server_id), VALUES(expires_at), expires_at)",
            (server_id, micros(ttl)),
        ),
        Stmt("SELECT server_id FROM kiln_leader WHERE name = 'default'"),
        begin=True, last=True,
    )
    rows = out[1].rows
    return bool(rows) and rows[0][0] == server_id


def leader_resign(server_id: str) -> Plan[None]:
    yield one("DELETE FROM kiln_leader WHERE server_id = %s", server_id)


def installation_get() -> Plan[str | None]:
    out = yield one("SELECT id FROM kiln_installation ORDER BY created_at, id LIMIT 1")
    return None if not out[0].rows else str(out[0].rows[0][0])


def leader_get() -> Plan[str | None]:
    out = yield one(
        f"SELECT server_id FROM kiln_leader WHERE name = 'default' AND expires_at >= {NOW}"
    )
    return None if not out[0].rows else str(out[0].rows[0][0])


def rescue_candidates(dead_after: float, limit: int) -> Plan[list[RescueCandidate]]:
    cutoff = f"{NOW} - INTERVAL %s MICROSECOND"
    out = yield one(
        f"SELECT {J_COLS} FROM kiln_jobs j LEFT JOIN kiln_servers s ON s.id = j.server_id"
        f" WHERE j.state = 'running' AND (s.id IS NULL OR s.heartbeat_at < {cutoff})"
        f" AND j.attempted_at < {cutoff} ORDER BY j.id LIMIT %s",
        micros(dead_after), micros(dead_after), limit,
    )
    return [
        RescueCandidate(job=row_to_job(r), dead_server_id=r[18]) for r in out[0].rows
    ]


def running_on(server_id: str, older_than: float, limit: int) -> Plan[list[RunningJob]]:
    out = yield one(
        "SELECT id, queue, kind, attempt FROM kiln_jobs WHERE state = 'running'"
        f" AND server_id = %s AND attempted_at < {NOW} - INTERVAL %s MICROSECOND"
        " ORDER BY id LIMIT %s",
        server_id, micros(older_than), limit,
    )
    return [RunningJob(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in out[0].rows]


def ending_dead(dead_after: float) -> Plan[int]:
    """The attempts of jobs cancelled while running on servers now dead are over: their
    slots (kiln._model._concurrency) are free."""
    out = yield one(
        "UPDATE kiln_jobs j SET j.attempt_running = FALSE WHERE j.attempt_running"
        " AND j.state = 'cancelled' AND NOT EXISTS (SELECT 1 FROM kiln_servers s"
        f" WHERE s.id = j.server_id AND s.heartbeat_at >= {NOW} - INTERVAL %s MICROSECOND)",
        micros(dead_after),
    )
    return out[0].rowcount


def sweep(dead_for: float) -> Plan[int]:
    out = yield one(
        f"DELETE FROM kiln_servers WHERE heartbeat_at < {NOW} - INTERVAL %s MICROSECOND",
        micros(dead_for),
    )
    return out[0].rowcount


def prune(state: JobState, older_than: float, limit: int) -> Plan[int]:
    """Delete finished jobs past their retention, releasing their dependents as delete
    does (``_admin.remove``)."""
    bound = yield from _rollup_sql.prune_bound()  # nothing the rollup has not seen
    out = yield step(
        Stmt(
            "SELECT id FROM kiln_jobs WHERE state = %s"
            f" AND finished_at < {NOW} - INTERVAL %s MICROSECOND"
            f" AND finished_at < {_rollup_sql.at('%s')}"
            " ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED",
            (state.value, micros(older_than), int(bound * 1_000_000), limit),
        ),
        begin=True,
    )
    ids = sorted(int(r[0]) for r in out[0].rows)
    yield from remove(ids)
    return len(ids)


def release_stranded(limit: int) -> Plan[dict[str, int]]:
    """Release awaiting jobs none of whose dependencies is unfinished (each completed or
    gone): locked first, then checked again after the lock, as a completion does."""
    out = yield step(
        Stmt(
            "SELECT j.id FROM kiln_jobs j WHERE j.state = 'awaiting' AND NOT EXISTS"
            " (SELECT 1 FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
            "  WHERE d.job_id = j.id AND o.state <> 'completed')"
            " ORDER BY j.id LIMIT %s FOR UPDATE SKIP LOCKED",
            (limit,),
        ),
        begin=True,
    )
    ids = [int(r[0]) for r in out[0].rows]
    if not ids:
        return {}
    m = marks(len(ids))
    res = yield step(
        Stmt(
            f"SELECT id, queue, rate_key IS NOT NULL, run_at > {NOW}, {NOW} FROM kiln_jobs"
            f" WHERE id IN ({m}) AND state = 'awaiting' ORDER BY id",
            ids,
        ),
        Stmt(
            "SELECT DISTINCT d.job_id FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
            f" WHERE d.job_id IN ({m}) AND o.state <> 'completed'",
            ids,
        ),
    )
    update, _ = release_dependents(res[0], res[1])
    stuck = {int(r[0]) for r in res[1].rows}
    released: dict[str, int] = {}
    for r in res[0].rows:
        if int(r[0]) not in stuck:
            released[r[1]] = released.get(r[1], 0) + 1
    if update is not None:
        yield step(update, last=True)
    return released


# recurring jobs and audit --------------------------------------------------------------
def cron_enqueue(name: str, slot: datetime, job: NewJob, returning: bool) -> Plan[int | None]:
    """Take slot ``slot`` of ``name`` (a first row, or a later slot than the stored one)
    and insert the job in the same transaction. The row is locked for update before it
    is compared, so concurrent callers queue up instead of deadlocking; two callers
    inserting the very first row collide on the key and the store retries the loser."""
    at = to_db(slot)
    out = yield step(
        Stmt("SELECT last_slot FROM kiln_cron WHERE name = %s FOR UPDATE", (name,)),
        begin=True,
    )
    if out[0].rows and out[0].rows[0][0] >= at:
        return None
    if out[0].rows:
        took = Stmt("UPDATE kiln_cron SET last_slot = %s WHERE name = %s", (at, name))
    else:
        took = Stmt("INSERT INTO kiln_cron (name, last_slot) VALUES (%s, %s)", (name, at))
    yield step(took)
    ids = yield from insert([job], returning, alone=False)  # one transaction with the slot
    return ids[0]


def cron_last_slot(name: str) -> Plan[datetime | None]:
    out = yield one("SELECT last_slot FROM kiln_cron WHERE name = %s", name)
    return None if not out[0].rows else from_db(out[0].rows[0][0])


def audit_record(actor: str, action: str, n: int, detail: dict[str, Any]) -> Plan[None]:
    yield one(
        f"INSERT INTO kiln_audit (at, actor, action, count, detail) VALUES ({NOW}, %s, %s, %s, %s)",
        actor, action, n, dumps(detail),
    )


def audit_list(limit: int, q: AuditQuery) -> Plan[list[AuditEntry]]:
    where, params = audit_where(q, "LOCATE(%s, actor) > 0",
                                to_db(q.since) if q.since else None,
                                to_db(q.until) if q.until else None)
    out = yield one(
        f"SELECT id, at, actor, action, count, detail FROM kiln_audit{where} "
        "ORDER BY id DESC LIMIT %s",
        *params, limit,
    )
    return [
        AuditEntry(id=int(r[0]), at=from_db_required(r[1]), actor=r[2], action=r[3],
                   count=int(r[4]), detail=loads(r[5]) or {})
        for r in out[0].rows
    ]


# the timings rollup (kiln.stores.mysql._rollup) ----------------------------------------
timings_roll = _rollup_sql.roll
timings_rolled_to = _rollup_sql.rolled_to
