"""The queues page, the fleet's control room: per queue its state, backlog, running vs
limit, throughput sparkline and controls (which post to kiln.web._queue_actions).

Owns what the page (and /api/queues) reads and how a queue's row is put together.
Pages of PER_PAGE queues (``page``, and ``name`` to find one).
Every figure is one grouped query for all queues, cached by the Source like the other
aggregates (counts, oldest wait, completed per minute, running per server); the
controls and the servers are two small tables, read per request, so a change made here
shows on the next page. Must not write anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from urllib.parse import urlencode

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from kiln._model._controls import ALL, FLEET, QueueControls, QueuePause
from kiln._model._job import JobState, ServerInfo
from kiln.web import _charts, _params
from kiln.web._dashboard import Dashboard
from kiln.web._pages import alive
from kiln.web._series import BUCKET, POINTS
from kiln.web._source import Counts, Estimate

OVERRIDE_SERVER, OVERRIDE_FLEET, AS_STARTED = "server", "fleet", "configured"


@dataclasses.dataclass(frozen=True, slots=True)
class ServerShare:
    """One live server's part of a queue: its running jobs and its limit, and where the
    limit comes from (a limit set for this server, one set fleet-wide, or as started)."""

    server_id: str
    running: int
    limit: int
    configured: int
    source: str  # OVERRIDE_SERVER, OVERRIDE_FLEET or AS_STARTED


@dataclasses.dataclass(frozen=True, slots=True)
class QueueView:
    name: str
    pause: QueuePause | None  # its own pause or the one of "*"
    states: dict[JobState, int]
    oldest: float | None  # seconds the oldest available job has waited
    shares: tuple[ServerShare, ...]  # live servers of the queue, by id
    running_elsewhere: int  # running on servers that are not alive (rescue takes them)
    completed: tuple[int, ...]  # per minute over the last hour, oldest first

    @property
    def available(self) -> int:
        return self.states[JobState.AVAILABLE]

    @property
    def scheduled(self) -> int:
        return self.states[JobState.SCHEDULED]

    @property
    def backlog(self) -> int:
        return self.available + self.scheduled

    @property
    def running(self) -> int:
        return sum(s.running for s in self.shares)

    @property
    def limit(self) -> int:
        return sum(s.limit for s in self.shares)

    @property
    def overrides(self) -> int:
        return sum(s.source == OVERRIDE_SERVER for s in self.shares)


def _share(controls: QueueControls, queue: str, server: ServerInfo, running: int
           ) -> ServerShare:
    configured = server.queues[queue]
    own = {lim.server_id: lim.concurrency for lim in controls.limits if lim.queue == queue}
    source = OVERRIDE_SERVER if server.id in own else \
        OVERRIDE_FLEET if FLEET in own else AS_STARTED
    return ServerShare(server.id, running, controls.limit_of(queue, server.id, configured),
                       configured, source)


def views(
    counts: Counts, oldest: Mapping[str, float], live: Sequence[ServerInfo],
    controls: QueueControls, running: Sequence[tuple[str, str, int]],
    completed: Mapping[str, tuple[int, ...]],
) -> list[QueueView]:
    """Every known queue's row: a queue with jobs, a live server, a wait, a pause or a
    job completed in the last hour."""
    names = sorted(set(counts.queues()) | {q for s in live for q in s.queues} | set(oldest)
                   | {p.queue for p in controls.pauses if p.queue != ALL} | set(completed))
    on = {(q, sid): n for q, sid, n in running}
    alive = {s.id for s in live}
    empty = (0,) * POINTS
    return [QueueView(
        name=q, pause=controls.pause_of(q), states=counts.by_state(q), oldest=oldest.get(q),
        shares=tuple(_share(controls, q, s, on.get((q, s.id), 0))
                     for s in sorted(live, key=lambda s: s.id) if q in s.queues),
        running_elsewhere=sum(n for (rq, sid), n in on.items() if rq == q and sid not in alive),
        completed=completed.get(q, empty),
    ) for q in names]


PER_PAGE = 50  # queues per page: 312 queues were a 3 MB page, refreshed every 5 s


@dataclasses.dataclass(frozen=True, slots=True)
class Paging:
    """Which queues a page shows: ``number`` of ``pages``, rows ``first`` to ``last``
    (1-based) of ``total`` that match ``name`` (a part of the queue's name)."""

    number: int
    pages: int
    total: int
    first: int
    last: int
    name: str | None

    def query(self, number: int) -> str:
        return urlencode({"page": number, **({"name": self.name} if self.name else {})})


def paged(rows: Sequence[QueueView], params: Mapping[str, str]
          ) -> tuple[list[QueueView], Paging]:
    """The page of ``rows`` the request asks for (``page``, 1 by default; past the last
    page: the last), of those whose name holds ``name`` (any case)."""
    name = _params.text(params, "name")
    if name is not None:
        rows = [v for v in rows if name.casefold() in v.name.casefold()]
    pages = max(1, -(-len(rows) // PER_PAGE))
    number = min(_params.integer(params, "page", 1, 1, 1_000_000) or 1, pages)
    start = (number - 1) * PER_PAGE
    shown = list(rows[start:start + PER_PAGE])
    return shown, Paging(number, pages, len(rows), start + 1 if shown else 0,
                         start + len(shown), name)


def sparkline(view: QueueView, as_of: float) -> Markup:
    """The queue's completions per minute; none for a queue that completed nothing in
    the hour (60 empty bars with their labels were most of a page of idle queues)."""
    if not any(view.completed):
        return Markup("")
    labels = [time.strftime("%H:%M UTC", time.gmtime(as_of - (POINTS - 1 - i) * BUCKET))
              for i in range(POINTS)]
    return _charts.bars(f"jobs of {view.name} completed", view.completed, labels,
                        "completed spark")


async def read(dashboard: Dashboard
               ) -> tuple[list[QueueView], QueuePause | None, dict[str, float]]:
    """The rows of the page, the pause of every queue ("*") if any, and the time each
    cached figure was read (as_of)."""
    source = dashboard.source
    client = await source.client()
    counted, waited, ran, done, servers, controls = await asyncio.gather(
        source.counts.snapshot(), source.oldest.snapshot(), source.running.snapshot(),
        source.queue_series.snapshot(), client.servers(), client.queue_controls(),
    )
    rows = views(counted.value, waited.value, alive(servers, dashboard.dead_after),
                 controls, ran.value, done.value)
    return rows, controls.pause_of(ALL), {
        "counts": counted.as_of, "oldest": waited.as_of, "running": ran.as_of,
        "series": done.as_of,
    }


async def render(request: Request, flash: str | None = None, error: str | None = None,
                 status: int = 200) -> Response:
    """The page; ``error`` (a refused control's message) is shown above the table."""
    dashboard: Dashboard = request.app.state.kiln
    every, paused_all, as_of = await read(dashboard)
    rows, paging = paged(every, request.query_params)
    return dashboard.render(
        request, "queues.html", status=status, title="Queues", nav="queues", rows=rows,
        sparks={v.name: sparkline(v, as_of["series"]) for v in rows}, paging=paging,
        paused_all=paused_all, flash=flash, error=error, refresh=error is None,
        as_of=as_of, estimated=any(isinstance(n, Estimate) for v in rows
                                   for n in v.states.values()),
    )


async def queues(request: Request) -> Response:
    return await render(request, flash=flash_of(request.query_params))


def flash_of(params: Mapping[str, str]) -> str | None:
    """What the last control did (fixed wording, nothing echoed from the request)."""
    done, n = params.get("done"), params.get("n")
    if done == "pause":
        return "Paused: its servers claim nothing more; running jobs finish." if n == "1" \
            else "Already paused: nothing changed."
    if done == "resume":
        return "Resumed: its servers claim again." if n not in (None, "0") \
            else "Not paused: nothing changed."
    if done == "concurrency":
        return "Concurrency changed: every server applies it within one notification."
    return None
