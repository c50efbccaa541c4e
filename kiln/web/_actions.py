"""Actions: requeue, cancel or delete one job, a selection, or every failed job matching
a filter (after a confirmation page that shows how many, and binds the action to them).

Owns the state-changing handlers. Each one checks the CSRF token, makes exactly one
Client call (which writes the audit entry: who, what, how many, when) and redirects
(303) to a page that says what happened; an "all matching" action instead starts a
batched run (kiln._bulk: an audit entry per batch), and redirects to its progress page
when it takes longer than ``Dashboard.bulk_wait``. Read-only mode never reaches them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from starlette.datastructures import FormData, ImmutableMultiDict
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from kiln import _bulk
from kiln._client import Client
from kiln._job import JobFilter, JobState
from kiln.web import _audit, _jobs, _params
from kiln.web._dashboard import Dashboard
from kiln.web._jobs import VERBS
from kiln.web._params import BadRequest, JobQuery

FINISHED = frozenset({JobState.FAILED, JobState.CANCELLED, JobState.COMPLETED})


def actor_of(request: Request) -> str:
    """Who acted, as the audit log records it: the signed-in user and their address."""
    return _audit.actor_of(request.scope)


def _fields(form: FormData) -> ImmutableMultiDict[str, str]:
    """The form's text fields; a repeated one (tag, meta, arg) keeps every value."""
    return ImmutableMultiDict([(k, v) for k, v in form.multi_items() if isinstance(v, str)])


async def _apply(dashboard: Dashboard, request: Request, action: str, f: JobFilter) -> int:
    if action not in VERBS:
        raise BadRequest(f"unknown action {action[:40]!r}: use requeue, cancel or delete")
    client: Client = await dashboard.source.client()
    actor = actor_of(request)
    if action == "requeue":
        n = await client.requeue(f, actor=actor, dead_after=dashboard.dead_after)
    elif action == "cancel":
        n = await client.cancel(f, actor=actor)
    else:
        n = await client.delete(f, actor=actor)
    # refresh the counts here, so the page this redirects to shows the change at once
    # without waiting for the GROUP BY itself
    dashboard.source.invalidate()
    await dashboard.source.counts.get()
    return n


async def single(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    job_id = _params.job_id(request.path_params["job_id"])
    action = str(request.path_params["action"])
    if action not in VERBS:
        raise HTTPException(404, f"No such action {action[:40]!r}: use requeue, cancel or delete.")
    await dashboard.form(request)
    before = await (await dashboard.source.client()).get(job_id) if action == "cancel" else None
    n = await _apply(dashboard, request, action, JobFilter(ids=(job_id,)))
    done = f"done={action}&n={n}"
    if before is not None and before.state is JobState.RUNNING and n:
        done += "&running=1"  # its handler is being stopped on its server
    elif before is not None and before.state in FINISHED and not n:
        done += f"&finished={before.state.value}"
    if action == "requeue" and not n and await _held(dashboard, job_id):
        done += "&held=1"
    if action == "delete" and n:
        return dashboard.redirect(request, "/jobs", done)
    return dashboard.redirect(request, f"/jobs/{job_id}", done)


async def _held(dashboard: Dashboard, job_id: int) -> bool:
    """A cancelled job that a requeue left alone: its attempt may still be running."""
    row = await (await dashboard.source.client()).get(job_id)
    return row is not None and row.state is JobState.CANCELLED


async def bulk(request: Request) -> Response:
    """The ticked jobs of a listing; the listing's filter only says where to return."""
    dashboard: Dashboard = request.app.state.kiln
    form = await dashboard.form(request)
    fields = _fields(form)
    back = JobQuery.parse(fields)
    ids = _params.ids([v for v in form.getlist("ids") if isinstance(v, str)])
    action = fields.get("action", "")
    n = await _apply(dashboard, request, action, JobFilter(ids=ids))
    return dashboard.redirect(request, "/jobs", back.query(done=action, n=n))


def _failed_query(params: Mapping[str, str]) -> JobQuery:
    query = JobQuery.parse(params)
    if query.state is not JobState.FAILED:
        raise BadRequest("requeue all works on the Failed tab: give state=failed")
    return query


async def bound_now(client: Client, f: JobFilter) -> JobFilter:
    """``f`` bounded to the jobs that match it now: by id, and when every state it selects
    is a finished one, by finish time too (a job requeued and failed again is excluded).

    A confirmation page shows the count of this filter and posts its bounds back, so
    the action does what the page showed: jobs that match only later are left alone.
    """
    return await _bulk.bound(client, dataclasses.replace(f, max_id=None,
                                                         finished_before=None))


def bound_from(form: Mapping[str, str], f: JobFilter) -> JobFilter:
    """``f`` with the bounds a confirmation page posted (a 400 without them)."""
    max_id, finished_before = _params.upper_bound(form)
    return dataclasses.replace(f, max_id=max_id, finished_before=finished_before)


ALLOWED = {"requeue": _jobs.REQUEUEABLE, "cancel": _jobs.CANCELLABLE,
           "delete": _jobs.DELETABLE}


def _all_query(action: str, params: Mapping[str, str]) -> tuple[JobQuery, JobFilter]:
    """The listing's query and the filter an "all matching" action applies: the tab's
    state when the action allows it (a 400 when it does not), else every state it does."""
    if action not in ALLOWED:
        raise HTTPException(404, f"No such action {action[:40]!r}: use requeue, cancel or "
                                 "delete.")
    query = JobQuery.parse(params)
    allowed = ALLOWED[action]
    if query.state is not None and query.state not in allowed:
        raise BadRequest(f"{query.state.value} jobs cannot be {VERBS[action]}: "
                         f"{action} works on {', '.join(sorted(s.value for s in allowed))}")
    f = query.filter()
    if query.state is None:
        f = dataclasses.replace(f, states=tuple(s for s in JobState if s in allowed))
    return query, f


async def all_confirm(request: Request) -> Response:
    """Every job matching the listing's filter, for requeue, cancel or delete: shows
    how many before anything changes and binds the confirmation to them (bound_now)."""
    dashboard: Dashboard = request.app.state.kiln
    action = str(request.path_params["action"])
    query, f = _all_query(action, request.query_params)
    f = dataclasses.replace(f, created_after=query.pinned().filter().created_after,
                            created_before=query.pinned().filter().created_before)
    client = await dashboard.source.client()
    bound = await bound_now(client, f)
    count = await client.count(bound)
    return dashboard.render(
        request, "confirm_all.html", title=f"{action.capitalize()} all matching",
        nav="jobs", q=query.pinned(), count=count, bound=bound, action=action,
        verb=VERBS[action], fields=query.fields(),
        states=[s.value for s in bound.states],
    )


async def all_apply(request: Request) -> Response:
    """The jobs the confirmation page showed, in batches (kiln._bulk)."""
    dashboard: Dashboard = request.app.state.kiln
    action = str(request.path_params["action"])
    form = await dashboard.form(request)
    fields = _fields(form)
    query, f = _all_query(action, fields)
    return await _run_all(dashboard, request, action, query, bound_from(fields, f))


async def _run_all(dashboard: Dashboard, request: Request, action: str, query: JobQuery,
                   bound: JobFilter) -> Response:
    """Start the batched run of ``action`` over ``bound``; wait ``bulk_wait`` for it: a run
    done by then redirects to the listing, a longer one (or a failed one) to its page."""
    client: Client = await dashboard.source.client()
    bulk = _bulk.Bulk(client, action, bound, await client.count(bound),
                      actor=actor_of(request), batch_size=dashboard.bulk_batch,
                      dead_after=dashboard.dead_after)
    run = dashboard.bulk_runs.start(bulk, query, after=dashboard.source.invalidate)
    if await run.wait(dashboard.bulk_wait) and run.error is None:
        await dashboard.source.counts.get()  # the listing shows the change at once
        n = run.bulk.progress.done
        return dashboard.redirect(request, "/jobs", query.query(before=None, done=action, n=n))
    return dashboard.redirect(request, f"/jobs/all/runs/{bulk.run_id}")


async def bulk_progress(request: Request) -> Response:
    """How far a batched run is; refreshes itself while it runs."""
    dashboard: Dashboard = request.app.state.kiln
    run = dashboard.bulk_runs.get(str(request.path_params["run_id"]))
    p = run.bulk.progress
    running = not run.task.done()
    return dashboard.render(
        request, "bulk_progress.html", title=f"{p.action.capitalize()} all matching",
        nav="jobs", refresh=running, p=p, running=running, error=run.error,
        verb=VERBS[p.action], q=run.query, bound=run.bulk.filter, fields=run.query.fields(),
        run_batch=run.bulk.batch_size,
    )


async def requeue_all_confirm(request: Request) -> Response:
    """Shows how many failed jobs match the filter before anything changes, and binds
    the confirmation to exactly those (see bound_now)."""
    dashboard: Dashboard = request.app.state.kiln
    query = _failed_query(request.query_params)
    client = await dashboard.source.client()
    bound = await bound_now(client, query.pinned().filter())
    count = await client.count(bound)
    return dashboard.render(
        request, "confirm.html", title="Requeue failed jobs", nav="jobs", q=query.pinned(),
        count=count,
        bound=bound, fields=query.fields(),
    )


async def requeue_all(request: Request) -> Response:
    """The failed jobs the confirmation page showed, in batches (as all_apply)."""
    dashboard: Dashboard = request.app.state.kiln
    form = await dashboard.form(request)
    fields = _fields(form)
    query = _failed_query(fields)
    return await _run_all(dashboard, request, "requeue", query,
                          bound_from(fields, query.filter()))
