"""PostgreSQL plans for the cluster: servers, leader, rescue, sweep, prune,
rate-limit admission, recurring jobs and the audit log.

Owns these statements; the store runs the plans (see _plan). Time is the database's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kiln._job import (
    Admission,
    AdmitResult,
    AuditEntry,
    JobState,
    NewJob,
    RateLimit,
    RescueCandidate,
    RunningJob,
    ServerInfo,
)
from kiln.stores._admission import plan as admission_plan
from kiln.stores._rows import dumps, epoch, loads
from kiln.stores.postgres import _jobs
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


def server_heartbeat(server_id: str) -> Plan[bool]:
    sql = "UPDATE kiln_servers SET heartbeat_at = now() WHERE id = %s RETURNING 1"
    rows = (yield one(sql, server_id, prepare=True))[0]
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
        " greatest(extract(epoch FROM now() - heartbeat_at), 0)::float8"
        " FROM kiln_servers ORDER BY started_at, id"
    )
    rows = (yield one(sql))[0]
    return [
        ServerInfo(
            id=r[0], host=r[1], pid=r[2], queues=loads(r[3]), kinds=loads(r[4]),
            version=r[5], started_at=r[6], heartbeat_at=r[7], heartbeat_age=r[8],
        )
        for r in rows
    ]


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


def sweep(dead_for: float) -> Plan[int]:
    sql = (
        "WITH d AS (DELETE FROM kiln_servers WHERE heartbeat_at < now() - %s * interval"
        " '1 second' RETURNING 1) SELECT count(*) FROM d"
    )
    rows = (yield one(sql, dead_for))[0]
    return int(rows[0][0])


PRUNE = (
    "WITH del AS (DELETE FROM kiln_jobs WHERE id IN (SELECT id FROM kiln_jobs WHERE"
    " state = %s AND finished_at < now() - %s * interval '1 second' ORDER BY finished_at"
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
        yield step(*_jobs.release_stmts(ids), Stmt(_jobs.DELETE_EDGES, (ids,)), last=True)
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
    f"{_jobs.notify_from('rel')} SELECT queue, count(*) FROM rel"
    f" WHERE {_jobs.NOTIFIED} GROUP BY queue"
)


def release_stranded(limit: int) -> Plan[dict[str, int]]:
    rows = (yield step(Stmt(STRANDED_LOCK, (limit,))))[0]
    if not rows:
        return {}
    ids = [int(r[0]) for r in rows]
    out = (yield step(Stmt(STRANDED_RELEASE, (ids,)), last=True))[0]
    return _jobs.counted(out)


# rate limits -------------------------------------------------------------------------
def rate_limit_declare(key: str, limit: RateLimit) -> Plan[None]:
    yield step(_jobs.rate_limit_stmt({key: limit}), last=True)


def rate_keys_pending() -> Plan[list[str]]:
    sql = (
        "SELECT DISTINCT rate_key FROM kiln_jobs WHERE state = 'pending' AND run_at <= now()"
        " ORDER BY rate_key"
    )
    rows = (yield one(sql, prepare=True))[0]
    return [str(r[0]) for r in rows]


ADMIT_LOCK = (
    "SELECT rate, per, burst, tokens, extract(epoch FROM updated_at)::float8"
    " FROM kiln_rate_limits WHERE key = %s FOR UPDATE"
)
# A separate statement, so that both its snapshot and clock_timestamp() come after the
# lock above was granted (now() is the transaction's start, before any wait).
ADMIT_READ = (
    "WITH c AS MATERIALIZED (SELECT clock_timestamp() AS at),"
    " l AS (SELECT per FROM kiln_rate_limits WHERE key = %s)"
    " SELECT c.at, extract(epoch FROM c.at)::float8,"
    " (SELECT count(*) FROM kiln_jobs, l WHERE rate_key = %s"
    "  AND admitted_at > c.at - l.per * interval '1 second'),"
    " (SELECT extract(epoch FROM min(admitted_at))::float8 FROM kiln_jobs, l"
    "  WHERE rate_key = %s AND admitted_at > c.at - l.per * interval '1 second'),"
    " (SELECT count(*) FROM (SELECT 1 FROM kiln_jobs WHERE rate_key = %s"
    "  AND state = 'pending' LIMIT %s) AS p),"
    " ARRAY(SELECT id FROM kiln_jobs WHERE rate_key = %s AND state = 'pending'"
    "  AND run_at <= c.at ORDER BY priority, run_at, id LIMIT %s)"
    " FROM c"
)
ADMIT_WRITE = (
    "WITH adm AS (UPDATE kiln_jobs SET state = 'available', admitted_at = %s, run_at = %s"
    " WHERE id = ANY(%s::bigint[]) AND state = 'pending'"
    " RETURNING id, queue, kind, state, run_at, created_at)"
    f"{_jobs.notify_from('adm')} SELECT id, queue, kind,"
    " greatest(extract(epoch FROM %s - created_at), 0)::float8 FROM adm"
    f" WHERE {_jobs.NOTIFIED} ORDER BY id"
)
ADMIT_TOKENS = "UPDATE kiln_rate_limits SET tokens = %s, updated_at = %s WHERE key = %s"


def admit(key: str, max_batch: int) -> Plan[AdmitResult]:
    out = yield step(
        Stmt(ADMIT_LOCK, (key,)),
        Stmt(ADMIT_READ, (key, key, key, key, max_batch + 1, key, max_batch)),
    )
    if not out[0]:
        return AdmitResult(admitted=[], next_at=None, declared=False)
    rate, per, burst, tokens, updated_at = out[0][0]
    at, now, in_window, oldest, pending, due = out[1][0]
    limit = RateLimit(rate=rate, per=per, burst=burst)
    decision = admission_plan(limit, tokens, updated_at, now, int(in_window), len(due), oldest)
    chosen = list(due[: decision.admit])
    stmts = [Stmt(ADMIT_TOKENS, (decision.tokens, at, key))]
    if chosen:
        stmts.insert(0, Stmt(ADMIT_WRITE, (at, at, chosen, at)))
    res = yield step(*stmts, last=True)
    rows = res[0] if chosen else []
    admitted = [Admission(job_id=r[0], queue=r[1], kind=r[2], delay=r[3]) for r in rows]
    more = int(pending) > len(admitted)
    return AdmitResult(admitted=admitted, next_at=decision.next_at if more else None)


def rate_limit_list() -> Plan[list[tuple[str, RateLimit, int]]]:
    sql = (
        "SELECT r.key, r.rate, r.per, r.burst, (SELECT count(*) FROM kiln_jobs j"
        " WHERE j.rate_key = r.key AND j.state = 'pending') FROM kiln_rate_limits r"
        " ORDER BY r.key"
    )
    rows = (yield one(sql))[0]
    return [(r[0], RateLimit(rate=r[1], per=r[2], burst=r[3]), int(r[4])) for r in rows]


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
    ids = yield from _jobs.insert([job])
    return ids[0]


def cron_last_slot(name: str) -> Plan[datetime | None]:
    rows = (yield one("SELECT last_slot FROM kiln_cron WHERE name = %s", name))[0]
    return None if not rows else rows[0][0]


def audit_record(actor: str, action: str, n: int, detail: dict[str, Any]) -> Plan[None]:
    yield one(
        "INSERT INTO kiln_audit (actor, action, count, detail) VALUES (%s, %s, %s, %s::jsonb)",
        actor, action, n, dumps(detail),
    )


def audit_list(limit: int) -> Plan[list[AuditEntry]]:
    sql = "SELECT id, at, actor, action, count, detail FROM kiln_audit ORDER BY id DESC LIMIT %s"
    rows = (yield one(sql, limit))[0]
    return [
        AuditEntry(id=r[0], at=r[1], actor=r[2], action=r[3], count=r[4],
                   detail=loads(r[5]) or {})
        for r in rows
    ]
