"""The JSON API under ``/api/``: the data of every page, for scripts and other tools.

Same auth, Host allowlist and audit as the pages (the Guard runs before every route),
read-only (actions stay on the pages, behind CSRF and a confirmation), and the same
parameters with the same limits: a bad one is a 400. Every error
under ``/api/`` (the Guard's own refusals included) is JSON of one shape,
``{"error": {"code": ..., "message": ...}}`` (``error``). Listings
page by id like the pages do: ``next`` is the query string of the next page, or null.
Owns the JSON shapes; reads only through the Source, like the pages.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from kiln._client._fleet import ERROR_GROUP_SCAN
from kiln._model._job import JobRow, JobState
from kiln._model._wire import job_json, server_json
from kiln.web import _jobs, _pages, _params, _queues_page
from kiln.web._dashboard import Dashboard
from kiln.web._params import JobQuery
from kiln.web._source import Estimate
from kiln.web._timeline import RECENT_AUDIT, actions_of, timeline

ENDPOINTS = {
    "/api/overview": "counts by state and queue, throughput, servers, leader, health",
    "/api/jobs": "jobs, filtered and paged like /jobs (state, queue, kind, error, since,"
                 " until, order, before, after, limit)",
    "/api/jobs/{id}": "one job, with its timeline, dependencies and dependents",
    "/api/queues": "queues, 50 a page (page, name): paused (since, by), counts by state,"
                   " backlog, running vs limit per live server, completed per minute,"
                   " oldest wait",
    "/api/servers": "registered servers, the leader, and the jobs each one runs now",
    "/api/kinds": "jobs by kind and state, and the declarations servers published",
    "/api/series": "completed, failed and cancelled jobs per minute over the last hour",
    "/api/errors": "the failed jobs grouped by their last error (message, class, jobs,"
                   " highest id, the query of the group's jobs), most common first, under"
                   " the /jobs filters",
    "/api/timings": "per queue or kind (by=queue|kind) over a range (range=1h|6h|24h|7d):"
                    " completed, failed, per minute, run and wait p50/p95/p99 (seconds, at"
                    " most), and the series per bucket (name=one queue or kind)",
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
        # the figures that are estimates (more than COUNT_CAP jobs of a queue in a state)
        "estimated": sorted({f"{r.queue}/{r.state.value}" for r in counts.rows
                             if r.estimated}),
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
    full = request.query_params.get("full") == "1"
    window = await _jobs.scan_window(client, query)  # the Available tab, args filters
    listed = query.filter() if window is None else dataclasses.replace(
        query.filter(), min_id=window[0])
    rows = await client.list(listed, query.limit + 1, before, after, brief=not full)
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    nxt = query.next_page(rows[-1].id) if more and rows else None
    searched = None
    if window is not None and not more and window[0] > 1:  # the window ran out
        nxt, searched = query.next_page(window[0]), {"from_id": window[0],
                                                     "below_id": window[1]}
    return _json({"jobs": [_bounded(r) for r in rows], "next": nxt, "searched": searched})


def _bounded(row: JobRow) -> dict[str, Any]:
    """A listed job; from a brief listing (the default), with args, params and metadata
    over 4 KiB as JSON text left out (null) and errors down to the last one without its
    traceback: ``cut`` says which, their size in bytes and where they are whole."""
    data = job_json(row)
    if row.cut:
        data.update({k: None for k in row.cut if k != "errors"})
        data["cut"] = {"bytes": dict(row.cut), "whole": f"/api/jobs/{row.id}"}
    return data


async def job(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    job_id = _params.job_id(request.path_params["job_id"])
    client = await dashboard.source.client()
    row = await client.get(job_id)
    if row is None:
        raise HTTPException(404, f"there is no job {job_id}: it was deleted or pruned, or "
                                 "never existed")
    data = job_json(row)
    actions = actions_of(await client.audit(RECENT_AUDIT), job_id)
    data["timeline"] = [step.to_json() for step in timeline(row, time.time(), actions)]
    data["dependents"] = await client.dependents(job_id)
    return _json(data)


async def queues(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    every, _all, as_of = await _queues_page.read(dashboard)
    rows, paging = _queues_page.paged(every, request.query_params)
    more = paging.number < paging.pages
    return _json({"as_of": as_of["counts"], "as_of_figures": as_of,
                  "queues": [_queue_json(v) for v in rows], "total": paging.total,
                  "next": paging.query(paging.number + 1) if more else None})


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
    rows, leader, controls, counts = await asyncio.gather(
        client.servers(), client.leader(), client.queue_controls(), client.running_counts())
    running = await _pages.running_now(dashboard, rows)
    views = {v.server.id: v for v in _pages.server_views(rows, controls, counts)}
    return _json({
        "leader": leader,
        "dead_after": dashboard.dead_after,
        "servers": [
            {**server_json(s, leader),
             "alive": s.heartbeat_age is not None and s.heartbeat_age < dashboard.dead_after,
             "concurrency": views[s.id].concurrency,
             "configured": views[s.id].configured,
             "concurrency_by_queue": {q: controls.limit_of(q, s.id, n)
                                      for q, n in sorted(s.queues.items())},
             "quiet": views[s.id].quiet,
             "running_count": views[s.id].running,
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
            # states counted by kind from a sample (over the store's cap: kiln.stores._capped)
            "estimated": [s.value for s, n in k.states.items() if isinstance(n, Estimate)],
            "declaration": k.options,
            "servers": k.servers,
            "conflict": k.conflict,
        } for k in view.kinds],
    })


async def series(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    shown = await dashboard.source.series.snapshot()
    return _json({"as_of": shown.as_of, **shown.value.to_json()})


async def errors(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    query = dataclasses.replace(JobQuery.parse(request.query_params), state=JobState.FAILED,
                                error_is=None, before=None, after=None)
    shown = await dashboard.source.error_groups(query.filter(), _jobs.MAX_GROUPS).snapshot()
    return _json({"as_of": shown.as_of, "scan": ERROR_GROUP_SCAN, "groups": [
        {"error": g.message, "error_class": g.error_class or None, "jobs": g.jobs,
         "max_id": g.max_id, "jobs_query": query.query(error_is=g.message, limit=None)}
        for g in _jobs.error_groups(list(shown.value))]})


async def timings(request: Request) -> Response:
    return _json((await _pages.timings_of(request)).to_json())


def not_found(request: Request) -> Response:
    return _json({"error": {"code": CODES[404],
                            "message": f"no such endpoint: {request.url.path}"},
                  "endpoints": sorted(ENDPOINTS)}, 404)


# the error codes of the API, by HTTP status (a refusal may name a narrower one)
CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
         405: "method_not_allowed", 409: "conflict", 413: "too_large",
         429: "too_many_attempts", 500: "internal", 503: "unavailable"}


def error(status: int, message: str, code: str | None = None) -> Response:
    """An API error: ``{"error": {"code": ..., "message": ...}}`` with ``status``."""
    return _json({"error": {"code": code or CODES.get(status, "error"),
                            "message": message}}, status)


def is_api_path(path: str) -> bool:
    """Whether ``path`` (below the mount point) is the API's."""
    return path == "/api" or path.startswith("/api/")


def is_api(request: Request) -> bool:
    base = str(request.scope.get("root_path", ""))
    return is_api_path(str(request.url.path).removeprefix(base))


