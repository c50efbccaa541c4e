"""SQLite statements for the cluster: servers, the leader, rescue, sweep, prune,
recurring jobs and the audit log (rate limits are in _rates).

Write operations are called through ``_plan.write``, which wraps them in BEGIN
IMMEDIATE, so the write lock is taken before anything is read and "now" is read after it.
"""

from __future__ import annotations

import sqlite3
import time
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
from kiln.stores._rows import dumps, epoch, loads, ts, ts_required
from kiln.stores.sqlite._admin import remove
from kiln.stores.sqlite._jobs import MET, insert, release_rows, row_to_job
from kiln.stores.sqlite._rollup import prune_bound


# servers and leader ------------------------------------------------------------------
def server_register(conn: sqlite3.Connection, info: ServerInfo) -> None:
    now = time.time()
    conn.execute(
        "INSERT OR REPLACE INTO kiln_servers (id, host, pid, queues, kinds, version, started_at,"
        " heartbeat_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (info.id, info.host, info.pid, dumps(info.queues), dumps(info.kinds), info.version,
         epoch(info.started_at), now),
    )


def server_heartbeat(
    conn: sqlite3.Connection, server_id: str, connections: int | None = None
) -> bool:
    cur = conn.execute(
        "UPDATE kiln_servers SET heartbeat_at = ?, connections = coalesce(?, connections)"
        " WHERE id = ?", (time.time(), connections, server_id)
    )
    return cur.rowcount == 1


def server_deregister(conn: sqlite3.Connection, server_id: str) -> None:
    conn.execute("DELETE FROM kiln_servers WHERE id = ?", (server_id,))
    conn.execute("DELETE FROM kiln_leader WHERE server_id = ?", (server_id,))


def server_list(conn: sqlite3.Connection) -> list[ServerInfo]:
    now = time.time()
    rows = conn.execute("SELECT * FROM kiln_servers ORDER BY started_at").fetchall()
    return [
        ServerInfo(
            id=r["id"], host=r["host"], pid=r["pid"], queues=loads(r["queues"]),
            kinds=loads(r["kinds"]), version=r["version"], started_at=ts_required(r["started_at"]),
            heartbeat_at=ts(r["heartbeat_at"]), heartbeat_age=max(now - r["heartbeat_at"], 0.0),
            connections=r["connections"],
        )
        for r in rows
    ]


def leader_elect(conn: sqlite3.Connection, server_id: str, ttl: float) -> bool:
    now = time.time()
    conn.execute(
        "INSERT INTO kiln_leader (name, server_id, expires_at) VALUES ('default', ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET server_id = excluded.server_id,"
        " expires_at = excluded.expires_at"
        " WHERE kiln_leader.server_id = excluded.server_id OR kiln_leader.expires_at < ?",
        (server_id, now + ttl, now),
    )
    row = conn.execute("SELECT server_id FROM kiln_leader WHERE name = 'default'").fetchone()
    return row is not None and row[0] == server_id


def leader_resign(conn: sqlite3.Connection, server_id: str) -> None:
    conn.execute("DELETE FROM kiln_leader WHERE server_id = ?", (server_id,))


def installation_get(conn: sqlite3.Connection) -> str | None:
    row = conn.execute(
        "SELECT id FROM kiln_installation ORDER BY created_at, id LIMIT 1").fetchone()
    return None if row is None else str(row[0])


def leader_get(conn: sqlite3.Connection) -> str | None:
    row = conn.execute(
        "SELECT server_id FROM kiln_leader WHERE name = 'default' AND expires_at >= ?",
        (time.time(),),
    ).fetchone()
    return None if row is None else str(row[0])


# INDEXED BY: for ORDER BY id LIMIT, SQLite walked the whole table in rowid order and
# checked each row's state (0.7 s every 15 s with 10,000,000 jobs waiting and none
# running); the running jobs' partial index holds only them, sorted here by id
# (tests/stores/test_sqlite_maintenance_plans.py)
RESCUE = (
    "SELECT j.* FROM kiln_jobs j INDEXED BY kiln_jobs_running"
    " LEFT JOIN kiln_servers s ON s.id = j.server_id"
    " WHERE j.state = 'running' AND (s.id IS NULL OR s.heartbeat_at < ?)"
    " AND j.attempted_at < ? ORDER BY j.id LIMIT ?"
)


def rescue_candidates(
    conn: sqlite3.Connection, dead_after: float, limit: int
) -> list[RescueCandidate]:
    cutoff = time.time() - dead_after
    rows = conn.execute(RESCUE, (cutoff, cutoff, limit)).fetchall()
    return [RescueCandidate(job=row_to_job(r), dead_server_id=r["server_id"]) for r in rows]


def running_on(
    conn: sqlite3.Connection, server_id: str, older_than: float, limit: int
) -> list[RunningJob]:
    rows = conn.execute(
        "SELECT id, queue, kind, attempt FROM kiln_jobs WHERE state = 'running'"
        " AND server_id = ? AND attempted_at < ? ORDER BY id LIMIT ?",
        (server_id, time.time() - older_than, limit),
    ).fetchall()
    return [RunningJob(int(r[0]), str(r[1]), str(r[2]), int(r[3])) for r in rows]


def ending_dead(conn: sqlite3.Connection, dead_after: float) -> int:
    """The attempts of jobs cancelled while running on servers now dead are over: their
    slots (kiln._model._concurrency) are free."""
    cur = conn.execute(
        "UPDATE kiln_jobs SET attempt_running = 0 WHERE state = 'cancelled' AND attempt_running"
        " AND NOT EXISTS (SELECT 1 FROM kiln_servers s WHERE s.id = kiln_jobs.server_id"
        " AND s.heartbeat_at >= ?)",
        (time.time() - dead_after,),
    )
    return cur.rowcount


def sweep(conn: sqlite3.Connection, dead_for: float) -> int:
    cur = conn.execute(
        "DELETE FROM kiln_servers WHERE heartbeat_at < ?", (time.time() - dead_for,)
    )
    return cur.rowcount


def prune(conn: sqlite3.Connection, state: JobState, older_than: float, limit: int) -> int:
    now = time.time()
    cutoff = min(now - older_than, prune_bound(conn, now))  # nothing the rollup has not seen
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT id FROM kiln_jobs WHERE state = ? AND finished_at < ? LIMIT ?",
            (state.value, cutoff, limit),
        )
    ]
    remove(conn, ids)  # releases their dependents, as delete does
    return len(ids)


# The awaiting jobs through kiln_jobs_state_queue (state, queue, id), not the table:
# for ORDER BY id LIMIT, SQLite walked every job in rowid order (0.7 s every 60 s with
# 10,000,000 jobs waiting and none awaiting). Within one queue the index is in id order,
# so each queue's walk stops at its ``limit``-th stranded job; the lowest ``limit`` ids
# of those are the lowest of all. AWAITING_QUEUES: one descent per queue.
AWAITING_QUEUES = (
    "WITH RECURSIVE q(queue) AS (SELECT MIN(queue) FROM kiln_jobs"
    " INDEXED BY kiln_jobs_state_queue WHERE state = 'awaiting' UNION ALL"
    " SELECT (SELECT MIN(k.queue) FROM kiln_jobs k INDEXED BY kiln_jobs_state_queue"
    " WHERE k.state = 'awaiting' AND k.queue > q.queue) FROM q WHERE q.queue IS NOT NULL)"
    " SELECT queue FROM q WHERE queue IS NOT NULL"
)
STRANDED = (
    "SELECT j.id, j.queue, j.rate_key, j.run_at FROM kiln_jobs j"
    f" INDEXED BY kiln_jobs_state_queue WHERE j.state = 'awaiting' AND j.queue = ? AND {MET}"
    " ORDER BY j.id LIMIT ?"
)


def stranded(conn: sqlite3.Connection, limit: int) -> list[sqlite3.Row]:
    """The ``limit`` lowest-id awaiting jobs whose dependencies are all met."""
    rows: list[sqlite3.Row] = []
    for (queue,) in conn.execute(AWAITING_QUEUES).fetchall():
        rows.extend(conn.execute(STRANDED, (queue, limit)).fetchall())
    return sorted(rows, key=lambda r: int(r[0]))[:limit]


def release_stranded(conn: sqlite3.Connection, limit: int) -> dict[str, int]:
    """Release awaiting jobs none of whose dependencies is unfinished (each completed or
    gone), which nothing else would release; returns queue -> jobs released."""
    rows = stranded(conn, limit)
    return {q: total for q, (_, total) in release_rows(conn, rows, time.time()).items()}


# recurring jobs and audit --------------------------------------------------------------
def cron_enqueue(conn: sqlite3.Connection, name: str, slot: datetime, job: NewJob) -> int | None:
    at = epoch(slot)
    cur = conn.execute(
        "INSERT INTO kiln_cron (name, last_slot) VALUES (?, ?) ON CONFLICT (name) DO UPDATE"
        " SET last_slot = excluded.last_slot WHERE kiln_cron.last_slot < excluded.last_slot",
        (name, at),
    )
    if cur.rowcount != 1:
        return None
    return insert(conn, [job])[0]


def cron_last_slot(conn: sqlite3.Connection, name: str) -> datetime | None:
    row = conn.execute("SELECT last_slot FROM kiln_cron WHERE name = ?", (name,)).fetchone()
    return None if row is None else ts(row[0])


def audit_record(
    conn: sqlite3.Connection, actor: str, action: str, n: int, detail: dict[str, Any]
) -> None:
    conn.execute(
        "INSERT INTO kiln_audit (at, actor, action, count, detail) VALUES (?, ?, ?, ?, ?)",
        (time.time(), actor, action, n, dumps(detail)),
    )


def audit_list(conn: sqlite3.Connection, limit: int, q: AuditQuery) -> list[AuditEntry]:
    where, params = audit_where(q, "instr(actor, %s) > 0",
                                round(q.since.timestamp(), 6) if q.since else None,
                                round(q.until.timestamp(), 6) if q.until else None,
                                at="round(at, 6)")
    sql = f"SELECT * FROM kiln_audit{where} ORDER BY id DESC LIMIT %s".replace("%s", "?")
    rows = conn.execute(sql, (*params, limit)).fetchall()
    return [
        AuditEntry(id=r["id"], at=ts_required(r["at"]), actor=r["actor"], action=r["action"],
                   count=r["count"], detail=loads(r["detail"]) or {})
        for r in rows
    ]
