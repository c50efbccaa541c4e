"""The read-only pages: overview, queues, servers, recurring jobs, rate limits, audit log.

Owns what they read and how health is judged. Aggregates come from the Source's
caches; the small tables (servers, leader, rate limits, audit) are read per request.
"""

from __future__ import annotations

import asyncio
import dataclasses

from starlette.requests import Request
from starlette.responses import Response

from kiln._job import JobState, ServerInfo
from kiln.web import _params
from kiln.web._dashboard import Dashboard
from kiln.web._source import Counts

BACKLOG_WARN = 60.0  # seconds the oldest available job may wait before it is a warning


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
    store = (await source.client()).store
    # independent reads, so a cold start waits for the slowest, not for their sum
    counted, through, waited, servers, leader = await asyncio.gather(
        source.counts.snapshot(), source.throughput.snapshot(), source.oldest.snapshot(),
        store.server_list(), store.leader_get(),
    )
    counts, oldest = counted.value, waited.value
    return dashboard.render(
        request, "overview.html", title="Overview", nav="overview", counts=counts,
        totals=counts.by_state(), throughput=through.value,
        servers=servers, alive=alive(servers, dashboard.dead_after), leader=leader,
        checks=health(counts, servers, leader, oldest, dashboard.dead_after), refresh=True,
        as_of={"counts": counted.as_of, "throughput": through.as_of,
               "checks": min(counted.as_of, waited.as_of)},
    )


async def queues(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    source = dashboard.source
    store = (await source.client()).store
    counted = await source.counts.snapshot()
    counts = counted.value
    live = alive(await store.server_list(), dashboard.dead_after)
    waited = await source.oldest.snapshot()
    oldest = waited.value
    names = sorted(set(counts.queues()) | {q for s in live for q in s.queues} | set(oldest))
    concurrency = {q: sum(s.queues.get(q, 0) for s in live) for q in names}
    return dashboard.render(
        request, "queues.html", title="Queues", nav="queues", names=names,
        table={q: counts.by_state(q) for q in names}, concurrency=concurrency, oldest=oldest,
        refresh=True, as_of={"counts": counted.as_of, "oldest": waited.as_of},
    )


async def servers(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    store = (await dashboard.source.client()).store
    rows = sorted(await store.server_list(), key=lambda s: s.id)
    return dashboard.render(
        request, "servers.html", title="Servers", nav="servers", servers=rows,
        leader=await store.leader_get(), dead_after=dashboard.dead_after, refresh=True,
    )


async def recurring(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    return dashboard.render(
        request, "recurring.html", title="Recurring jobs", nav="recurring",
        items=await dashboard.source.recurring_views(),
    )


async def rate_limits(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    store = (await dashboard.source.client()).store
    return dashboard.render(
        request, "rate_limits.html", title="Rate limits", nav="rate_limits",
        limits=await store.rate_limit_list(),
    )


async def audit(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    limit = _params.integer(request.query_params, "limit", 100, 1, _params.MAX_LIMIT)
    store = (await dashboard.source.client()).store
    return dashboard.render(
        request, "audit.html", title="Audit log", nav="audit",
        entries=await store.audit_list(limit or 100),
    )
