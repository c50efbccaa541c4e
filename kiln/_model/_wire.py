"""The JSON shape of a job and of a server: what ``kiln jobs show --json``, ``kiln
servers --json`` and the dashboard's ``/api/`` all print, written once."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kiln._model._job import JobRow, ServerInfo


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def job_json(row: JobRow, *, result: bool = False) -> dict[str, Any]:
    """``row`` for scripts; with ``result``, its stored result too (read by a get, never
    by a listing, which leaves it out rather than show a null it did not read)."""
    data = {
        "id": row.id,
        "queue": row.queue,
        "kind": row.kind,
        "state": row.state.value,
        "args": row.args,
        "params": row.params,
        "metadata": row.metadata,
        "tags": list(row.tags),
        "priority": row.priority,
        "attempt": row.attempt,
        "max_attempts": row.max_attempts,
        "timeout": row.timeout,
        "backoff": row.backoff,
        "run_at": _when(row.run_at),
        "created_at": _when(row.created_at),
        "admitted_at": _when(row.admitted_at),
        "attempted_at": _when(row.attempted_at),
        "finished_at": _when(row.finished_at),
        "server_id": row.server_id,
        "rate_key": row.rate_key,
        "rescues": row.rescues,
        "depends_on": list(row.depends_on),
        "errors": [e.to_json() for e in row.errors],
    }
    if result:
        data["result"] = row.result
    return data


def server_json(info: ServerInfo, leader: str | None) -> dict[str, Any]:
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "queues": info.queues,
        "kinds": info.kinds,
        "version": info.version,
        "started_at": _when(info.started_at),
        "heartbeat_at": _when(info.heartbeat_at),
        "heartbeat_age": info.heartbeat_age,
        "connections": info.connections,
        "leader": info.id == leader,
    }
