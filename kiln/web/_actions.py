"""Actions: requeue, cancel or delete one job, a selection, or every failed job matching
a filter (after a confirmation page that shows how many, and binds the action to them).

Owns the state-changing handlers. Each one checks the CSRF token, makes exactly one
Client call (which writes the audit entry: who, what, how many, when) and redirects
(303) to a page that says what happened; an "all matching" action instead starts a
batched run (kiln._client._bulk: an audit entry per batch), and redirects to its progress page
when it takes longer than ``Dashboard.bulk_wait``. Read-only mode never reaches them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from starlette.datastructures import FormData, ImmutableMultiDict
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from kiln._client import _bulk
from kiln._client._client import Client
from kiln._model._job import JobFilter, JobState
from kiln.web import _audit, _jobs, _params
from kiln.web._dashboard import Dashboard
from kiln.web._guard import route_path
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
    if not n and await (await dashboard.source.client()).get(job_id) is None:
        # deleted (another tab, the pruner) since the page was shown: say so, not "0 done"
        raise HTTPException(404, f"Job {job_id} no longer exists (deleted or pruned): it was "
                                 f"not {VERBS[action]}. Nothing was done.")
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


async def no_page(request: Request) -> Response:
    """A GET under a job: an action's URL answers 405 (it takes a POST); anything else
    is no page at all (404), not a "method not allowed" for a page that never was."""
    _params.job_id(request.path_params["job_id"])
    action = str(request.path_params["action"])
    if action in VERBS:
        raise HTTPException(405, f"{action} takes a POST (the button on the job's page).",
                            headers={"Allow": "POST"})
    raise HTTPException(404, "There is no such page.")


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
    held = await _held_of(dashboard, action, ids)
    extra: dict[str, object] = {"held": held, "many": 1} if held else {}
    if n < len(ids):  # ticked jobs deleted (another tab, the pruner) since the page was shown
        remaining = await (await dashboard.source.client()).count(JobFilter(ids=ids))
        gone = len(ids) - remaining - (n if action == "delete" else 0)
        if gone > 0:
            extra["gone"] = gone
    return dashboard.redirect(request, "/jobs", back.query(done=action, n=n, **extra))


async def _held_of(dashboard: Dashboard, action: str, ids: Sequence[int]) -> int:
    """How many of ``ids`` a requeue left cancelled: cancelled while running, their
    attempt may still be running (the store holds them until it has ended)."""
    if action != "requeue" or not ids:
        return 0
    client = await dashboard.source.client()
    return await client.count(JobFilter(ids=tuple(ids), states=(JobState.CANCELLED,)))


def _failed_query(params: Mapping[str, str]) -> JobQuery:
    query = JobQuery.parse(params)
    if query.state is not JobState.FAILED:
        raise BadRequest("requeue all works on the Failed tab: give state=failed")
    return query


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
    if action == "requeue" and query.state is None:  # no tab links to it: never all states
        raise BadRequest("requeue all matching works on one tab: give state= (failed, "
                         "cancelled, ...); requeueing every state would run completed "
                         "jobs again")
    f = query.filter()
    if query.state is None:
        f = dataclasses.replace(f, states=tuple(s for s in JobState if s in allowed))
    return query, f


async def all_confirm(request: Request) -> Response:
    """Every job matching the listing's filter, for requeue, cancel or delete: shows
    how many before anything changes and binds the confirmation to them
    (kiln._client._bulk.counted)."""
    dashboard: Dashboard = request.app.state.kiln
    action = str(request.path_params["action"])
    query, f = _all_query(action, request.query_params)
    return await _confirm_page(dashboard, request, action, query, f)


async def _confirm_page(dashboard: Dashboard, request: Request, action: str,
                        query: JobQuery, f: JobFilter, changed: str | None = None,
                        status: int = 200) -> Response:
    """The confirmation of an "all matching" action: the count of the jobs that match
    now, and the bounds and fingerprint of exactly that set for the POST to carry back
    (the Failed tab's requeue-all has a page of its own, ``confirm.html``)."""
    pinned = query.pinned().filter()
    f = dataclasses.replace(f, created_after=pinned.created_after,
                            created_before=pinned.created_before)
    client = await dashboard.source.client()
    bound, count, digest = await _bulk.counted(
        client, dataclasses.replace(f, max_id=None, finished_before=None))
    if route_path(request.scope) == "/jobs/requeue-all":  # the Failed tab's own page
        template, title = "confirm.html", "Requeue failed jobs"
    else:
        template, title = "confirm_all.html", f"{action.capitalize()} all matching"
    return dashboard.render(
        request, template, status=status, title=title,
        nav="jobs", q=query.pinned(), count=count, bound=bound, action=action,
        verb=VERBS[action], fields=query.fields(), digest=digest,
        states=[s.value for s in bound.states], changed=changed,
    )


async def all_apply(request: Request) -> Response:
    """The jobs the confirmation page showed, in batches (kiln._client._bulk)."""
    dashboard: Dashboard = request.app.state.kiln
    action = str(request.path_params["action"])
    form = await dashboard.form(request)
    fields = _fields(form)
    query, f = _all_query(action, fields)
    return await _run_all(dashboard, request, action, query, f, fields)


async def _run_all(dashboard: Dashboard, request: Request, action: str, query: JobQuery,
                   f: JobFilter, fields: Mapping[str, str]) -> Response:
    """Start the batched run of ``action`` over exactly the set the confirmation showed
    (its bounds, count and fingerprint, posted back), or refuse with a 409 and a fresh
    confirmation when that set has changed since; wait ``bulk_wait`` for the run: one
    done by then redirects to the listing, a longer one (or a failed one) to its page."""
    bound = bound_from(fields, f)
    shown, fingerprint = _params.shown_set(fields)
    client: Client = await dashboard.source.client()
    ids = await _bulk.matching_ids(client, bound)
    if len(ids) != shown or _bulk.digest(ids) != fingerprint:
        changed = (f"The set changed: {len(ids):,} now match (this page showed "
                   f"{shown:,}). Nothing was {VERBS[action]}; below is the set that "
                   "matches now.")
        return await _confirm_page(dashboard, request, action, query,
                                   dataclasses.replace(f, max_id=None, finished_before=None),
                                   changed=changed, status=409)
    bulk = _bulk.Bulk(client, action, bound, shown, actor=actor_of(request),
                      batch_size=dashboard.bulk_batch, dead_after=dashboard.dead_after,
                      only=ids)
    run = dashboard.bulk_runs.start(bulk, query, after=dashboard.source.invalidate)
    if await run.wait(dashboard.bulk_wait) and run.error is None:
        await dashboard.source.counts.get()  # the listing shows the change at once
        n = run.bulk.progress.done
        held = await _held_of(dashboard, action, ids)
        extra = {"held": held, "many": 1} if held else {}
        return dashboard.redirect(request, "/jobs",
                                  query.query(before=None, done=action, n=n, **extra))
    return dashboard.redirect(request, f"/jobs/all/runs/{bulk.run_id}")


async def bulk_progress(request: Request) -> Response:
    """How far a batched run is; refreshes itself while it runs."""
    dashboard: Dashboard = request.app.state.kiln
    run = dashboard.bulk_runs.get(str(request.path_params["run_id"]))
    p = run.bulk.progress
    running = not run.task.done()
    rest: list[int] = []
    if not running and run.error is not None:  # what "finish the rest" would act on
        shown = set(run.bulk.only or ())
        now = await _bulk.matching_ids(await dashboard.source.client(), run.bulk.filter)
        rest = [i for i in now if i in shown] if run.bulk.only is not None else now
    return dashboard.render(
        request, "bulk_progress.html", title=f"{p.action.capitalize()} all matching",
        nav="jobs", refresh=running, p=p, running=running, error=run.error,
        verb=VERBS[p.action], q=run.query, bound=run.bulk.filter, fields=run.query.fields(),
        run_batch=run.bulk.batch_size, count=len(rest), digest=_bulk.digest(rest),
    )


async def requeue_all_confirm(request: Request) -> Response:
    """Shows how many failed jobs match the filter before anything changes, and binds
    the confirmation to exactly those (see _confirm_page)."""
    dashboard: Dashboard = request.app.state.kiln
    query = _failed_query(request.query_params)
    return await _confirm_page(dashboard, request, "requeue", query, query.filter())


async def requeue_all(request: Request) -> Response:
    """The failed jobs the confirmation page showed, in batches (as all_apply)."""
    dashboard: Dashboard = request.app.state.kiln
    form = await dashboard.form(request)
    fields = _fields(form)
    query = _failed_query(fields)
    return await _run_all(dashboard, request, "requeue", query, query.filter(), fields)
