"""PostgreSQL plans for the cluster: servers, leader, rescue, sweep, prune, recurring
jobs and the audit log (rate limits are in _rates).

Owns these statements; the store runs the plans (see _plan). Time is the database's.
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
from kiln.stores._rows import dumps, epoch, loads
from kiln.stores.postgres import _admin, _insert, _jobs
from kiln.stores.postgres import _rollup as _rollup_sql
from kiln.stores.postgres._plan import Plan, Stmt, one, step

# servers and leader ------------------------------------------------------------------
SERVER_REGISTER = (
    "INSERT INTO kiln_servers (id, host, pid, queues, kinds, version, started_at,"
    " heartbeat_at) VALUES (%s, %s, %s, %s::jsonb, %s::jsonb, %s, %s, now())"
    " ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid,"
    " queues = excluded.queues, kinds = excluded.kinds, version = excluded.version,"
    " started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at"
)


def server_register(info: ServerInfo) -> Plan[None]:
    yield one(
        SERVER_REGISTER, info.id, info.host, info.pid, dumps(info.queues),
        dumps(info.kinds), info.version, info.started_at,
    )


def server_heartbeat(server_id: str, connections: int | None = None) -> Plan[bool]:
    sql = ("UPDATE kiln_servers SET heartbeat_at = now(),"
           " connections = coalesce(%s, connections) WHERE id = %s RETURNING 1")
    rows = (yield one(sql, connections, server_id, prepare=True))[0]
    return bool(rows)


def server_deregister(server_id: str) -> Plan[None]:
    yield one(
        "WITH s AS (DELETE FROM kiln_servers WHERE id = %s)"
        " DELETE FROM kiln_leader WHERE server_id = %s",
        server_id, server_id,
    )


def server_list() -> Plan[list[ServerInfo]]:
    sql = (
        "SELECT id, host, pid, queues, kinds, version, started_at, heartbeat_at,"
        " greatest(extract(epoch FROM now() - heartbeat_at), 0)::float8, connections"
        " FROM kiln_servers ORDER BY started_at, id"
    )
    rows = (yield one(sql))[0]
    return [
        ServerInfo(
            id=r[0], host=r[1], pid=r[2], queues=loads(r[3]), kinds=loads(r[4]),
            version=r[5], started_at=r[6], heartbeat_at=r[7], heartbeat_age=r[8],
            connections=r[9],
        )
        for r in rows
    ]


def installation_get() -> Plan[str | None]:
    rows = (yield one("SELECT id FROM kiln_installation ORDER BY created_at, id LIMIT 1"))[0]
    return None if not rows else str(rows[0][0])


LEADER_ELECT = (
    "INSERT INTO kiln_leader (name, server_id, expires_at)"
    " VALUES ('default', %s, now() + %s * interval '1 second')"
    " ON CONFLICT (name) DO UPDATE SET server_id = excluded.server_id,"
    " expires_at = excluded.expires_at WHERE kiln_leader.server_id = excluded.server_id"
    " OR kiln_leader.expires_at < now() RETURNING server_id"
)


def leader_elect(server_id: str, ttl: float) -> Plan[bool]:
    rows = (yield one(LEADER_ELECT, server_id, ttl, prepare=True))[0]
    return bool(rows)


def leader_resign(server_id: str) -> Plan[None]:
    yield one("DELETE FROM kiln_leader WHERE server_id = %s", server_id)


def leader_get() -> Plan[str | None]:
    sql = "SELECT server_id FROM kiln_leader WHERE name = 'default' AND expires_at >= now()"
    rows = (yield one(sql))[0]
    return None if not rows else str(rows[0][0])


# rescue, sweep, prune ----------------------------------------------------------------
RESCUE_CANDIDATES = (
    f"SELECT {_jobs.J_COLS} FROM kiln_jobs j LEFT JOIN kiln_servers s ON s.id = j.server_id"
    " WHERE j.state = 'running' AND (s.id IS NULL OR s.heartbeat_at < now() - %s * interval"
    " '1 second') AND j.attempted_at < now() - %s * interval '1 second' ORDER BY j.id LIMIT %s"
)


def rescue_candidates(dead_after: float, limit: int) -> Plan[list[RescueCandidate]]:
    rows = (yield one(RESCUE_CANDIDATES, dead_after, dead_after, limit))[0]
    return [RescueCandidate(job=_jobs.row_to_job(r), dead_server_id=str(r[18])) for r in rows]


RUNNING_ON = (
    "SELECT id, queue, kind, attempt FROM kiln_jobs WHERE state = 'running'"
    " AND server_id = %s AND attempted_at < now() - %s * interval '1 second'"
    " ORDER BY id LIMIT %s"
)


def running_on(server_id: str, older_than: float, limit: int) -> Plan[list[RunningJob]]:
    rows = (yield one(RUNNING_ON, server_id, older_than, limit))[0]
    return [RunningJob(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]


ENDING_DEAD = (
    "WITH upd AS (UPDATE kiln_jobs j SET attempt_running = false WHERE j.state = 'cancelled'"
    " AND j.attempt_running AND NOT EXISTS (SELECT 1 FROM kiln_servers s"
    " WHERE s.id = j.server_id AND s.heartbeat_at >= now() - %s * interval '1 second')"
    " RETURNING 1) SELECT count(*) FROM upd"
)


def ending_dead(dead_after: float) -> Plan[int]:
    """The attempts of jobs cancelled while running on servers now dead are over: their
    slots (kiln._model._concurrency) are free."""
    rows = (yield one(ENDING_DEAD, dead_after))[0]
    return int(rows[0][0])


def sweep(dead_for: float) -> Plan[int]:
    sql = (
        "WITH d AS (DELETE FROM kiln_servers WHERE heartbeat_at < now() - %s * interval"
        " '1 second' RETURNING 1) SELECT count(*) FROM d"
    )
    rows = (yield one(sql, dead_for))[0]
    return int(rows[0][0])


PRUNE = (
    "WITH del AS (DELETE FROM kiln_jobs WHERE id IN (SELECT id FROM kiln_jobs WHERE"
    " state = %s AND finished_at < now() - %s * interval '1 second'"
    f" AND finished_at < {_rollup_sql.PRUNE_BOUND} ORDER BY finished_at"
    " LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id),"
    " edges AS (DELETE FROM kiln_job_deps WHERE job_id IN (SELECT id FROM del))"
    " SELECT id FROM del"
)


def prune(state: JobState, older_than: float, limit: int) -> Plan[int]:
    """Delete, then release what waited only on the pruned jobs, as ``delete`` does: a
    pruned dependency no longer exists, and a missing dependency counts as met."""
    rows = (yield step(Stmt(PRUNE, (state.value, older_than, limit))))[0]
    ids = sorted(int(r[0]) for r in rows)
    if ids:
        yield step(*_jobs.release_stmts(ids), Stmt(_admin.DELETE_EDGES, (ids,)), last=True)
    return len(ids)


# Awaiting jobs none of whose dependencies is unfinished: every one completed or gone
# (pruned or deleted by a kiln that did not release, or a lost race). Locked first,
# then checked again in a statement of its own, whose snapshot follows the lock.
STRANDED_UNMET = (
    "NOT EXISTS (SELECT 1 FROM kiln_job_deps d JOIN kiln_jobs o ON o.id = d.dep_id"
    " WHERE d.job_id = j.id AND o.state <> 'completed')"
)

STRANDED_LOCK = (
    f"SELECT j.id FROM kiln_jobs j WHERE j.state = 'awaiting' AND {STRANDED_UNMET}"
    " ORDER BY j.id LIMIT %s FOR UPDATE SKIP LOCKED"
)

STRANDED_RELEASE = (
    "WITH rel AS (UPDATE kiln_jobs j SET state = CASE WHEN j.rate_key IS NOT NULL"
    " THEN 'pending' WHEN j.run_at > now() THEN 'scheduled' ELSE 'available' END,"
    " run_at = greatest(j.run_at, now())"
    f" WHERE j.id = ANY(%s::bigint[]) AND j.state = 'awaiting' AND {STRANDED_UNMET}"
    " RETURNING j.queue, j.state, j.run_at)"
    f"{_insert.notify_from('rel')} SELECT queue, count(*) FROM rel"
    f" WHERE {_insert.NOTIFIED} GROUP BY queue"
)


def release_stranded(limit: int) -> Plan[dict[str, int]]:
    rows = (yield step(Stmt(STRANDED_LOCK, (limit,))))[0]
    if not rows:
        return {}
    ids = [int(r[0]) for r in rows]
    out = (yield step(Stmt(STRANDED_RELEASE, (ids,)), last=True))[0]
    return _jobs.counted(out)


# recurring jobs and audit --------------------------------------------------------------
CRON_CLAIM = (
    "INSERT INTO kiln_cron (name, last_slot) VALUES (%s, to_timestamp(%s))"
    " ON CONFLICT (name) DO UPDATE SET last_slot = excluded.last_slot"
    " WHERE kiln_cron.last_slot < excluded.last_slot RETURNING 1"
)


def cron_enqueue(name: str, slot: datetime, job: NewJob) -> Plan[int | None]:
    """The upsert takes the cron row's lock, so concurrent callers enqueue a slot once."""
    rows = (yield step(Stmt(CRON_CLAIM, (name, epoch(slot)))))[0]
    if not rows:
        return None
    ids = yield from _jobs.insert([job], alone=False)  # one transaction with the slot
    return ids[0]


def cron_last_slot(name: str) -> Plan[datetime | None]:
    rows = (yield one("SELECT last_slot FROM kiln_cron WHERE name = %s", name))[0]
    return None if not rows else rows[0][0]


def audit_record(actor: str, action: str, n: int, detail: dict[str, Any]) -> Plan[None]:
    yield one(
        "INSERT INTO kiln_audit (actor, action, count, detail) VALUES (%s, %s, %s, %s::jsonb)",
        actor, action, n, dumps(detail),
    )


def audit_list(limit: int, q: AuditQuery) -> Plan[list[AuditEntry]]:
    where, params = audit_where(q, "strpos(actor, %s) > 0", q.since, q.until)
    sql = (f"SELECT id, at, actor, action, count, detail FROM kiln_audit{where} "
           "ORDER BY id DESC LIMIT %s")
    rows = (yield one(sql, *params, limit))[0]
    return [
        AuditEntry(id=r[0], at=r[1], actor=r[2], action=r[3], count=r[4],
                   detail=loads(r[5]) or {})
        for r in rows
    ]


# the timings rollup (kiln.stores.postgres._rollup) ------------------------------------
timings_roll = _rollup_sql.roll
timings_rolled_to = _rollup_sql.rolled_to
