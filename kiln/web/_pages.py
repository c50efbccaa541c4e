"""The pages: overview, servers, kinds, recurring jobs, rate limits (the queues page,
the control room, is kiln.web._queues_page; the audit log kiln.web._audit_page).

Owns what they read and how health is judged. Aggregates come from the Source's
caches; the small tables (servers, leader, rate limits, audit) are read per request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from kiln._model._controls import ALL, FLEET, QueueControls, QueuePause
from kiln._model._job import JobFilter, JobRow, JobState, PublishedKind, ServerInfo
from kiln.web import _charts, _timings
from kiln.web._dashboard import Dashboard
from kiln.web._series import BUCKET, FINISHED, POINTS, SPAN, Series
from kiln.web._source import Counts, Estimate

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
    counted, through, waited, servers, leader, controls = await asyncio.gather(
        source.counts.snapshot(), source.throughput.snapshot(), source.oldest.snapshot(),
        client.servers(), client.leader(), client.queue_controls(),
    )
    drawn = await source.series.snapshot()
    counts, oldest = counted.value, waited.value
    return dashboard.render(
        request, "overview.html", title="Overview", nav="overview", counts=counts,
        totals=counts.by_state(), throughput=through.value,
        servers=servers, alive=alive(servers, dashboard.dead_after), leader=leader,
        checks=[*health(counts, servers, leader, oldest, dashboard.dead_after),
                held_check(controls)],
        controls=controlled(controls), refresh=True,
        charts=charts(drawn.value, drawn.as_of), series=drawn.value,
        as_of={"counts": counted.as_of, "throughput": through.as_of,
               "checks": min(counted.as_of, waited.as_of), "series": drawn.as_of},
    )


def held_check(controls: QueueControls) -> Check:
    """Paused queues are a classic cause of a backlog: a check of their own."""
    names = sorted(p.queue for p in controls.pauses)
    if not names:
        return Check("paused queues", "ok", "none paused")
    if ALL in names:
        return Check("paused queues", "warn", "every queue is paused (*)")
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return Check("paused queues", "warn", f"{len(names)} paused: {shown}")


@dataclasses.dataclass(frozen=True, slots=True)
class Controlled:
    """A queue with a pause or a limit on it, as the overview lists it."""

    queue: str
    pause: QueuePause | None
    fleet: int | None  # the fleet-wide limit
    servers: dict[str, int]  # server id -> its own limit


MAX_CONTROLLED = 50  # queues the overview lists with their controls


def controlled(controls: QueueControls) -> list[Controlled]:
    pauses = {p.queue: p for p in controls.pauses}
    names = sorted(set(pauses) | {lim.queue for lim in controls.limits})
    out = []
    for q in names[:MAX_CONTROLLED]:
        limits = [lim for lim in controls.limits if lim.queue == q]
        out.append(Controlled(
            q, pauses.get(q),
            next((lim.concurrency for lim in limits if lim.server_id == FLEET), None),
            {lim.server_id: lim.concurrency for lim in limits if lim.server_id != FLEET}))
    return out


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
    rows = await client.list(JobFilter(states=(JobState.RUNNING,)), MAX_RUNNING, brief=True)
    running: dict[str, list[JobRow]] = {s.id: [] for s in servers}
    for row in rows:
        running.setdefault(row.server_id or "", []).append(row)
    return running


def quiet(server: ServerInfo, controls: QueueControls) -> bool:
    """Every queue of ``server`` has its own limit of 0: it claims nothing (see
    kiln.web._server_actions)."""
    own = {lim.queue: lim.concurrency for lim in controls.limits
           if lim.server_id == server.id}
    return bool(server.queues) and all(own.get(q) == 0 for q in server.queues)


def concurrency(server: ServerInfo, controls: QueueControls) -> int:
    """What ``server`` may run at once now, over all its queues (limits applied)."""
    return sum(controls.limit_of(q, server.id, n) for q, n in server.queues.items())


@dataclasses.dataclass(frozen=True, slots=True)
class ServerView:
    server: ServerInfo
    concurrency: int  # now, limits applied
    configured: int  # as started
    running: int  # jobs running on it now (one GROUP BY, not the listed ones)
    quiet: bool


def server_views(rows: list[ServerInfo], controls: QueueControls,
                 running: list[tuple[str, str, int]]) -> list[ServerView]:
    on: dict[str, int] = {}
    for _queue, server_id, n in running:
        on[server_id] = on.get(server_id, 0) + n
    return [ServerView(s, concurrency(s, controls), sum(s.queues.values()), on.get(s.id, 0),
                       quiet(s, controls)) for s in rows]


SERVER_DONE = {
    "quiet": "Quiet: it claims no new job on its {n} queue{s} and finishes what it runs.",
    "wake": "Woken: it claims again on its {n} queue{s}, with the limits it had before Quiet.",
}


def server_flash(params: Mapping[str, str]) -> str | None:
    said = SERVER_DONE.get(params.get("done", ""))
    raw = params.get("n", "")
    if said is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 6:
        return None
    if int(raw) == 0:
        return ("Already quiet: nothing changed." if params.get("done") == "quiet"
                else "Not quiet: nothing changed.")
    return said.format(n=int(raw), s="" if raw == "1" else "s")


async def servers(request: Request) -> Response:
    return await render_servers(request)


async def render_servers(request: Request, error: str | None = None,
                         status: int = 200) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    client = await dashboard.source.client()
    listed, controls, counts, leader = await asyncio.gather(
        client.servers(), client.queue_controls(), client.running_counts(), client.leader())
    rows = sorted(listed, key=lambda s: s.id)
    running = await running_now(dashboard, rows)
    return dashboard.render(
        request, "servers.html", status=status, title="Servers", nav="servers",
        servers=rows, views=server_views(rows, controls, counts),
        leader=leader, dead_after=dashboard.dead_after, refresh=error is None,
        running=running, running_total=sum(len(v) for v in running.values()),
        max_running=MAX_RUNNING, error=error,
        flash=server_flash(request.query_params),
        # running jobs whose server is not registered (pruned, or no id): listed too
        strays=sorted((k, v) for k, v in running.items() if k not in {s.id for s in rows}),
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
    estimated = any(isinstance(n, Estimate) for k in view.kinds for n in k.states.values())
    return dashboard.render(request, "kinds.html", title="Kinds", nav="kinds",
                            kinds=view.kinds, refresh=True, as_of={"counts": view.as_of},
                            estimated=estimated)


async def timings_of(request: Request) -> _timings.Timings:
    """The charts page's view for the request's range, grouping and group."""
    dashboard: Dashboard = request.app.state.kiln
    rng, by, group = _timings.parse(request.query_params)
    read = await dashboard.source.timings(rng, by).snapshot()
    return _timings.view(read.value, rng, by, group, read.as_of)


async def charts_page(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    shown = await timings_of(request)
    labels, dur = shown.labels, _timings.short_duration
    drawn = {
        "throughput": _charts.bars("finished", shown.throughput, labels, "completed"),
        "failed": _charts.bars("failed", shown.failed, labels, "failed"),
        "run": _charts.bars("p95 run time", shown.run_p95, labels, "run", dur),
        "wait": _charts.bars("p95 wait", shown.wait_p95, labels, "wait", dur),
    }
    return dashboard.render(
        request, "charts.html", title="Charts", nav="charts", t=shown, drawn=drawn,
        ranges=list(_timings.RANGES), refresh=True, as_of={"timings": shown.as_of},
    )


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
