"""The jobs pages: one tab per state with filters and keyset paging, and one page per job.

Owns what these pages read and show. Listings page by id (``before``), never by
offset, and take their tab counts from the cached per-state counts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from kiln._client._client import Client
from kiln._client._fleet import ERROR_GROUP_SCAN
from kiln._model._job import FINISHED_STATES, JobFilter, JobRow, JobState
from kiln.web import _params
from kiln.web._dashboard import Dashboard
from kiln.web._params import JobQuery
from kiln.web._source import Estimate
from kiln.web._timeline import RECENT_AUDIT, actions_of, timeline

MAX_LINKED = 100  # dependencies and dependents shown with their state on a job page
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
REQUEUEABLE = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.COMPLETED,
                         JobState.SCHEDULED, JobState.AVAILABLE})
CANCELLABLE = frozenset({JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED,
                         JobState.AVAILABLE, JobState.RUNNING})
DELETABLE = frozenset(JobState) - {JobState.RUNNING}
VERBS = {"requeue": "requeued", "cancel": "cancelled", "delete": "deleted"}
MAX_GROUPS = 20  # error groups the Failed tab shows
SCAN_IDS = 20_000  # ids a page of the Available tab or an args filter scans, at most
ERROR_CLASS = re.compile(r"^([A-Za-z_][\w.]*): ")  # "ConnectionError: smtp timeout"


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorGroup:
    """Failed jobs whose last attempt ended with the same error message."""

    error_class: str  # "ConnectionError" of "ConnectionError: smtp timeout", else ""
    message: str  # the whole message: what the group's filter matches exactly
    jobs: int
    max_id: int


def error_groups(rows: list[tuple[str, int, int]]) -> list[ErrorGroup]:
    out = []
    for message, jobs, max_id in rows:
        match = ERROR_CLASS.match(message)
        out.append(ErrorGroup(match.group(1) if match else "", message, jobs, max_id))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class Trace:
    trace_id: str
    span_id: str


def trace_of(metadata: Mapping[str, Any]) -> Trace | None:
    """The trace of the producer span, from W3C traceparent in the job's metadata."""
    holder = metadata.get("otel")
    value = holder.get("traceparent") if isinstance(holder, Mapping) else None
    if value is None:
        value = metadata.get("traceparent")
    if not isinstance(value, str):
        return None
    match = TRACEPARENT.match(value.strip().lower())
    if match is None or set(match.group(1)) == {"0"}:
        return None
    return Trace(trace_id=match.group(1), span_id=match.group(2))


def actions_for(state: JobState) -> list[str]:
    allowed = [("requeue", REQUEUEABLE), ("cancel", CANCELLABLE), ("delete", DELETABLE)]
    return [name for name, states in allowed if state in states]


def flash_of(params: Mapping[str, str]) -> str | None:
    """The result of the last action, from ``done`` and ``n`` (fixed wording, no echo),
    and how many of the ticked jobs no longer existed (``gone``)."""
    said = _flash(params)
    gone = params.get("gone", "")
    if said is None or not (gone.isascii() and gone.isdigit()) or not 0 < len(gone) <= 6 \
            or not int(gone):
        return said
    k = int(gone)
    return (f"{said} {k} of the ticked jobs no longer exist{'s' if k == 1 else ''} "
            "(deleted or pruned since the page was shown).")


def _flash(params: Mapping[str, str]) -> str | None:
    verb = VERBS.get(params.get("done", ""))
    raw = params.get("n", "")
    if verb is None or not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        return None
    n = int(raw)
    if params.get("done") == "cancel":
        said = _cancel_flash(n, params)
        if said is not None:
            return said
    held = params.get("held", "")
    if n == 0 and held == "1" and params.get("many") != "1":
        return ("Not requeued: the job was cancelled while running and its server is alive,"
                " so that attempt may still be running. Requeue it once the attempt has"
                " ended or its server is dead.")
    if params.get("done") == "requeue" and held.isascii() and held.isdigit() \
            and 0 < len(held) <= 12 and int(held):
        k = int(held)
        return (f"{n} job{'s' if n != 1 else ''} requeued. {k} cancelled while running "
                f"{'stay' if k != 1 else 'stays'} cancelled: "
                f"{'their attempts' if k != 1 else 'its attempt'} may still be running "
                "(requeue once the attempt has ended or its server is dead).")
    if n == 0:
        return f"No job was {verb}: none matched in a state that allows it."
    return f"{n} job{'s' if n != 1 else ''} {verb}."


def _cancel_flash(n: int, params: Mapping[str, str]) -> str | None:
    """What cancelling one job did to a running or finished one (fixed wording)."""
    if n == 1 and params.get("running") == "1":
        return ("1 job cancelled. It was running: its server stops the handler within one"
                " notification, or one heartbeat without notifications (a plain def"
                " handler must look at job.cancelled).")
    finished = params.get("finished", "")
    if n == 0 and finished in FINISHED_NAMES:
        return f"Not cancelled: the job had finished already ({finished})."
    return None


FINISHED_NAMES = frozenset(s.value for s in (JobState.COMPLETED, JobState.FAILED,
                                             JobState.CANCELLED))


async def listing(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    query = JobQuery.parse(request.query_params)
    client = await dashboard.source.client()
    before, after = query.page()
    grouped = query.state is JobState.FAILED and query.error_is is None
    window = await scan_window(client, query)
    listed = query.filter() if window is None else dataclasses.replace(
        query.filter(), min_id=window[0])
    rows, counted, groups = await asyncio.gather(
        client.list(listed, query.limit + 1, before, after, brief=True),
        dashboard.source.counts.snapshot(),
        dashboard.source.error_groups(query.filter(), MAX_GROUPS).snapshot() if grouped
        else _nothing(),
    )
    counts = counted.value
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    searched = window if window is not None and not more and window[0] > 1 else None
    older = query.next_page(rows[-1].id) if more and rows else None
    if searched is not None:  # the window ran out: the next one starts below it
        older = query.next_page(searched[0])
    tabs = counts.by_state(query.queue)
    return dashboard.render(
        request, "jobs.html", title=f"Jobs: {query.state.value if query.state else 'all'}",
        nav="jobs", q=query, rows=rows, tabs=tabs, total=total_of(tabs),
        estimated=any(isinstance(n, Estimate) for n in tabs.values()),
        queues=counts.queues(),
        older=older, searched=searched, scan_ids=SCAN_IDS,
        flash=flash_of(request.query_params),
        can_requeue_all=query.state is JobState.FAILED, as_of={"counts": counted.as_of},
        refresh=True, groups=error_groups(list(groups.value) if groups else []),
        group_scan=ERROR_GROUP_SCAN, groups_as_of=groups.as_of if groups else None,
    )


async def scan_window(client: Client, query: JobQuery) -> tuple[int, int] | None:
    """(lowest id, top id, exclusive) a newest-first page of the Available tab or of an
    args filter scans: SCAN_IDS ids below the page's cursor (or the newest job). No
    index serves them in id order (the available jobs' index is in claim order, the
    args have none), so the store walks the primary key: past millions of scheduled
    jobs above a backlog, 2.1 to 3.0 s at 3,000,000 (bench/RESULTS.md). A page that
    runs out of its window links to the next one instead. None: not such a listing."""
    if query.order != "newest" or not (query.state is JobState.AVAILABLE or query.args):
        return None
    top = query.before
    if top is None:
        newest = await client.list(JobFilter(), 1, brief=True)
        if not newest:
            return None
        top = newest[0].id + 1
    return max(top - SCAN_IDS, 1), top


def total_of(tabs: dict[JobState, int]) -> int:
    """The All tab's count: the sum, an Estimate if any tab's is."""
    total = sum(tabs.values())
    return Estimate(total) if any(isinstance(n, Estimate) for n in tabs.values()) else total


async def _nothing() -> None:
    return None


async def goto(request: Request) -> Response:
    """The nav's "job id" box: straight to that job's page (400 for a bad id)."""
    dashboard: Dashboard = request.app.state.kiln
    raw = request.query_params.get("id", "").strip().lstrip("#")
    if not raw:
        return RedirectResponse(f"{dashboard.base(request)}/jobs", status_code=303)
    return RedirectResponse(f"{dashboard.base(request)}/jobs/{_params.job_id(raw)}",
                            status_code=303)


async def _linked(dashboard: Dashboard, ids: list[int]) -> list[tuple[int, JobRow | None]]:
    """The first MAX_LINKED of ``ids`` with their rows (None: no longer exists)."""
    if not ids:
        return []
    client = await dashboard.source.client()
    shown = tuple(sorted(ids)[:MAX_LINKED])
    rows = {r.id: r for r in await client.list(JobFilter(ids=shown), limit=len(shown),
                                               brief=True)}
    return [(i, rows.get(i)) for i in shown]


async def detail(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    job_id = _params.job_id(request.path_params["job_id"])
    client = await dashboard.source.client()
    row = await client.get(job_id)
    if row is None:
        raise HTTPException(404, f"There is no job {job_id}: it was deleted or pruned, or never "
                                 "existed.")
    dependents = await client.dependents(job_id)
    return dashboard.render(
        request, "job.html", title=f"Job {row.id}", nav="jobs", job=row,
        waits_on=await _linked(dashboard, list(row.depends_on)),
        waits_on_total=len(row.depends_on),
        waited_by=await _linked(dashboard, dependents), waited_by_total=len(dependents),
        trace=trace_of(row.metadata), actions=actions_for(row.state),
        timeline=timeline(row, time.time(),
                          actions_of(await client.audit(RECENT_AUDIT), job_id)),
        flash=flash_of(request.query_params),
        full=request.query_params.get("full") == "1",  # every value whole ("show all")
        # a finished job's page stays still; a page showing a whole value too
        refresh=row.state not in FINISHED_STATES and request.query_params.get("full") != "1",
    )
