"""The JSON API under ``/api/``: the data of every page, for scripts and other tools.

Same auth, Host allowlist and audit as the pages (the Guard runs before every route),
read-only (actions stay on the pages, behind CSRF and a confirmation), and the same
parameters with the same limits: a bad one is a 400 with ``{"error": ...}``. Listings
page by id like the pages do: ``next`` is the query string of the next page, or null.
Owns the JSON shapes; reads only through the Source, like the pages.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kiln._job import JobState
from kiln.cli._output import job_json, server_json
from kiln.web import _pages, _params, _queues_page
from kiln.web._dashboard import Dashboard
from kiln.web._params import JobQuery
from kiln.web._timeline import timeline

ENDPOINTS = {
    "/api/overview": "counts by state and queue, throughput, servers, leader, health",
    "/api/jobs": "jobs, filtered and paged like /jobs (state, queue, kind, error, since,"
                 " until, order, before, after, limit)",
    "/api/jobs/{id}": "one job, with its timeline, dependencies and dependents",
    "/api/queues": "every queue: paused (since, by), counts by state, backlog, running vs"
                   " limit per live server, completed per minute, oldest wait",
    "/api/servers": "registered servers, the leader, and the jobs each one runs now",
    "/api/kinds": "jobs by kind and state, and the declarations servers published",
    "/api/series": "completed, failed and cancelled jobs per minute over the last hour",
}


def _json(data: Any, status: int = 200) -> Response:
    return JSONResponse(data, status_code=status, headers={"Cache-Control": "no-store"})


def _counts_json(by_state: dict[JobState, int]) -> dict[str, int]:
    return {s.value: n for s, n in by_state.items()}


async def index(request: Request) -> Response:
    return _json({"endpoints": ENDPOINTS})


async def overview(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    source = dashboard.source
    client = await source.client()
    counted, through, waited, servers, leader = await asyncio.gather(
        source.counts.snapshot(), source.throughput.snapshot(), source.oldest.snapshot(),
        client.servers(), client.leader(),
    )
    counts = counted.value
    checks = _pages.health(counts, servers, leader, waited.value, dashboard.dead_after)
    return _json({
        "as_of": counted.as_of,
        "states": _counts_json(counts.by_state()),
        "queues": {q: _counts_json(row) for q, row in counts.table().items()},
        "throughput": {"as_of": through.as_of, "last_5m": through.value["five"],
                       "last_hour": through.value["hour"]},
        "servers": {"registered": len(servers),
                    "alive": len(_pages.alive(servers, dashboard.dead_after))},
        "leader": leader,
        "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in checks],
    })


async def jobs(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    query = JobQuery.parse(request.query_params)
    client = await dashboard.source.client()
    before, after = query.page()
    rows = await client.list(query.filter(), query.limit + 1, before, after)
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    return _json({
        "jobs": [job_json(r) for r in rows],
        "next": query.next_page(rows[-1].id) if more and rows else None,
    })


async def job(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    job_id = _params.job_id(request.path_params["job_id"])
    client = await dashboard.source.client()
    row = await client.get(job_id)
    if row is None:
        raise HTTPException(404, f"there is no job {job_id}: it was deleted or pruned, or "
                                 "never existed")
    data = job_json(row)
    data["timeline"] = [step.to_json() for step in timeline(row, time.time())]
    data["dependents"] = await client.dependents(job_id)
    return _json(data)


async def queues(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    rows, _all, as_of = await _queues_page.read(dashboard)
    return _json({"as_of": as_of["counts"], "as_of_figures": as_of,
                  "queues": [_queue_json(v) for v in rows]})


def _queue_json(v: _queues_page.QueueView) -> dict[str, Any]:
    pause = v.pause
    return {
        "name": v.name,
        "paused": pause is not None,
        "paused_since": pause.paused_at.isoformat() if pause else None,
        "paused_by": pause.paused_by if pause else None,
        "paused_as": pause.queue if pause else None,  # the queue, or "*" for all
        "states": _counts_json(v.states),
        "backlog": v.backlog,
        "running": v.running,
        "limit": v.limit,
        "concurrency": v.limit,  # the sum of the live servers' limits, as before
        "running_on_dead_servers": v.running_elsewhere,
        "servers": [{"id": s.server_id, "running": s.running, "limit": s.limit,
                     "configured": s.configured, "limit_from": s.source} for s in v.shares],
        "completed_per_minute": list(v.completed),
        "oldest_available_seconds": v.oldest,
    }


async def servers(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    client = await dashboard.source.client()
    rows, leader = await asyncio.gather(client.servers(), client.leader())
    running = await _pages.running_now(dashboard, rows)
    return _json({
        "leader": leader,
        "dead_after": dashboard.dead_after,
        "servers": [
            {**server_json(s, leader),
             "alive": s.heartbeat_age is not None and s.heartbeat_age < dashboard.dead_after,
             "running": [{"id": r.id, "kind": r.kind, "queue": r.queue, "attempt": r.attempt,
                          "attempted_at": r.attempted_at.isoformat() if r.attempted_at else None}
                         for r in running.get(s.id, [])]}
            for s in sorted(rows, key=lambda s: s.id)
        ],
    })


async def kinds(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    view = await _pages.kinds_view(dashboard)
    return _json({
        "as_of": view.as_of,
        "kinds": [{
            "kind": k.kind,
            "states": _counts_json(k.states),
            "declaration": k.options,
            "servers": k.servers,
            "conflict": k.conflict,
        } for k in view.kinds],
    })


async def series(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    shown = await dashboard.source.series.snapshot()
    return _json({"as_of": shown.as_of, **shown.value.to_json()})


def not_found(request: Request) -> Response:
    return _json({"error": f"no such endpoint: {request.url.path}",
                  "endpoints": sorted(ENDPOINTS)}, 404)


def error(status: int, detail: str) -> Response:
    return _json({"error": detail}, status)


def is_api(request: Request) -> bool:
    base = request.scope.get("root_path", "")
    return str(request.url.path).removeprefix(base).startswith("/api/") or \
        str(request.url.path).removeprefix(base) == "/api"


