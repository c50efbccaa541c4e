"""The pages: overview, servers, kinds, recurring jobs, rate limits, audit log (the
queues page, the control room, is kiln.web._queues_page).

Owns what they read and how health is judged. Aggregates come from the Source's
caches; the small tables (servers, leader, rate limits, audit) are read per request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from kiln._job import JobFilter, JobRow, JobState, PublishedKind, ServerInfo
from kiln.web import _charts, _params
from kiln.web._dashboard import Dashboard
from kiln.web._series import BUCKET, FINISHED, POINTS, SPAN, Series
from kiln.web._source import Counts

BACKLOG_WARN = 60.0  # seconds the oldest available job may wait before it is a warning
MAX_RUNNING = 500  # running jobs the servers page lists


@dataclasses.dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str  # ok, warn, bad
    detail: str


def alive(servers: list[ServerInfo], dead_after: float) -> list[ServerInfo]:
    return [s for s in servers if s.heartbeat_age is not None and s.heartbeat_age < dead_after]


def health(
    counts: Counts, servers: list[ServerInfo], leader: str | None,
    oldest: dict[str, float], dead_after: float,
) -> list[Check]:
    live = alive(servers, dead_after)
    checks = [Check("database", "ok", "the job store answers")]
    if live:
        checks.append(Check("servers", "ok", f"{len(live)} of {len(servers)} alive"))
    else:
        checks.append(Check("servers", "bad", f"no server alive ({len(servers)} registered)"))
    if leader is not None and any(s.id == leader for s in live):
        checks.append(Check("leader", "ok", leader))
    else:
        checks.append(Check("leader", "warn" if live else "bad",
                            "no leader: recurring jobs, rescue and pruning are not running"))
    failed = counts.by_state()[JobState.FAILED]
    checks.append(Check("failed jobs", "warn" if failed else "ok", f"{failed} failed"))
    worst = max(oldest.items(), key=lambda kv: kv[1], default=None)
    if worst is None:
        checks.append(Check("backlog", "ok", "no job is waiting"))
    else:
        status = "warn" if worst[1] > BACKLOG_WARN else "ok"
        checks.append(Check("backlog", status,
                            f"oldest available job waits {worst[1]:.1f}s (queue {worst[0]})"))
    return checks


async def overview(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    source = dashboard.source
    client = await source.client()
    # independent reads, so a cold start waits for the slowest, not for their sum
    counted, through, waited, servers, leader = await asyncio.gather(
        source.counts.snapshot(), source.throughput.snapshot(), source.oldest.snapshot(),
        client.servers(), client.leader(),
    )
    drawn = await source.series.snapshot()
    counts, oldest = counted.value, waited.value
    return dashboard.render(
        request, "overview.html", title="Overview", nav="overview", counts=counts,
        totals=counts.by_state(), throughput=through.value,
        servers=servers, alive=alive(servers, dashboard.dead_after), leader=leader,
        checks=health(counts, servers, leader, oldest, dashboard.dead_after), refresh=True,
        charts=charts(drawn.value, drawn.as_of), series=drawn.value,
        as_of={"counts": counted.as_of, "throughput": through.as_of,
               "checks": min(counted.as_of, waited.as_of), "series": drawn.as_of},
    )


def charts(series: Series, as_of: float) -> dict[str, Markup]:
    """The overview's charts: finished jobs per minute by state, and the backlog."""
    labels = [time.strftime("%H:%M UTC", time.gmtime(as_of - (POINTS - 1 - i) * BUCKET))
              for i in range(POINTS)]
    drawn = {state: _charts.bars(state, series.finished[state], labels, state)
             for state in FINISHED}
    drawn["backlog"] = _charts.line("available", series.backlog, as_of - SPAN, as_of,
                                    "backlog")
    return drawn


async def running_now(
    dashboard: Dashboard, servers: list[ServerInfo]
) -> dict[str, list[JobRow]]:
    """What each server runs now, by server id: the newest MAX_RUNNING running jobs."""
    client = await dashboard.source.client()
    rows = await client.list(JobFilter(states=(JobState.RUNNING,)), MAX_RUNNING)
    running: dict[str, list[JobRow]] = {s.id: [] for s in servers}
    for row in rows:
        running.setdefault(row.server_id or "", []).append(row)
    return running


async def servers(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    client = await dashboard.source.client()
    rows = sorted(await client.servers(), key=lambda s: s.id)
    running = await running_now(dashboard, rows)
    return dashboard.render(
        request, "servers.html", title="Servers", nav="servers", servers=rows,
        leader=await client.leader(), dead_after=dashboard.dead_after, refresh=True,
        running=running, running_total=sum(len(v) for v in running.values()),
        max_running=MAX_RUNNING,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class KindView:
    kind: str
    states: dict[JobState, int]
    options: dict[str, Any] | None  # the newest published declaration, if any
    servers: list[str]  # live servers that published one
    conflict: bool  # live servers declare it differently


@dataclasses.dataclass(frozen=True, slots=True)
class KindsView:
    kinds: list[KindView]
    as_of: float


async def kinds_view(dashboard: Dashboard) -> KindsView:
    source = dashboard.source
    client = await source.client()
    counted, published = await asyncio.gather(source.kind_counts.snapshot(),
                                              client.published_kinds())
    declared: dict[str, list[PublishedKind]] = {}
    for p in published:
        declared.setdefault(p.declaration.kind, []).append(p)
    views = []
    for kind in sorted(set(counted.value) | set(declared)):
        mine = declared.get(kind, [])
        live = [p for p in mine if p.live]
        views.append(KindView(
            kind=kind, states=counted.value.get(kind, dict.fromkeys(JobState, 0)),
            options=dict(mine[0].declaration.options) if mine else None,
            servers=sorted({p.server_id for p in live}),
            conflict=len({p.declaration.digest for p in live}) > 1,
        ))
    return KindsView(views, counted.as_of)


async def kinds(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    view = await kinds_view(dashboard)
    return dashboard.render(request, "kinds.html", title="Kinds", nav="kinds",
                            kinds=view.kinds, refresh=True, as_of={"counts": view.as_of})


async def recurring(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    return dashboard.render(
        request, "recurring.html", title="Recurring jobs", nav="recurring",
        items=await dashboard.source.recurring_views(),
    )


async def rate_limits(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    client = await dashboard.source.client()
    return dashboard.render(
        request, "rate_limits.html", title="Rate limits", nav="rate_limits",
        limits=await client.rate_limits(),
    )


async def audit(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    limit = _params.integer(request.query_params, "limit", 100, 1, _params.MAX_LIMIT)
    client = await dashboard.source.client()
    return dashboard.render(
        request, "audit.html", title="Audit log", nav="audit",
        entries=await client.audit(limit or 100),
    )
