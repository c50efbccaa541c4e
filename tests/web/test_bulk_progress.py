"""An "all matching" action over many jobs runs in batches in the background: the
confirmation redirects to a progress page that refreshes itself, each batch is audited
as it commits, and a run stopped by an error offers to finish the rest within the same
bounds (jobs that fail later are left alone)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from kiln import Client
from kiln._errors import StoreError
from kiln._model._job import JobFilter, JobState
from kiln.web import create_app
from kiln.web._dashboard import Dashboard
from tests.support.web import MakeHttp, fail_jobs, hidden_fields

RUN = re.compile(r"/jobs/all/runs/([0-9a-f]+)$")


def _gated(client: Client, fail_on: int = 0) -> tuple[asyncio.Event, list[int]]:
    """Hold the store's requeue before its second batch until the event is set; with
    ``fail_on``, that call raises instead (a connection lost between two batches)."""
    gate, calls = asyncio.Event(), []
    original = client._store.jobs_requeue

    async def requeue(f: JobFilter, dead_after: float = 60.0) -> int:
        calls.append(len(f.ids))
        if len(calls) == 2:
            await gate.wait()
        if len(calls) == fail_on:
            raise StoreError("jobs_requeue", "connection lost (injected)")
        return await original(f, dead_after)

    setattr(client._store, "jobs_requeue", requeue)  # noqa: B010
    return gate, calls


def _dashboard(app: Any, batch: int) -> Dashboard:
    dashboard: Dashboard = app.state.kiln
    dashboard.bulk_batch, dashboard.bulk_wait = batch, 0.05
    return dashboard


async def test_a_long_run_shows_its_progress_until_done(make_http: MakeHttp,
                                                        client: Client) -> None:
    app = create_app(client)
    dashboard, http = _dashboard(app, 4), make_http(app=app)
    ids = await fail_jobs(client, 10)
    confirm = await http.get("/jobs/all/requeue?state=failed")
    gate, calls = _gated(client)
    response = await http.post("/jobs/all/requeue", data=hidden_fields(confirm.text))
    assert response.status_code == 303
    match = RUN.search(response.headers["location"])
    assert match, response.headers["location"]
    run = dashboard.bulk_runs.get(match.group(1))
    while len(calls) < 2:  # the first batch committed, the second waits at the gate
        await asyncio.sleep(0.01)
    page = (await http.get(f"/jobs/all/runs/{match.group(1)}")).text
    assert '<progress id="bulk-progress" max="10" value="4">' in page
    assert '<strong id="bulk-done">4</strong> requeued' in page and "Running" in page
    assert "data-refresh=" in page  # follows the run by itself
    assert [e.count for e in await client._store.audit_list(10)] == [4]  # as it commits
    gate.set()
    await asyncio.wait_for(run.task, 10)
    page = (await http.get(f"/jobs/all/runs/{match.group(1)}")).text
    assert "Done: 10 jobs requeued." in page and "data-refresh=" not in page
    assert calls == [4, 4, 2]
    assert {(await client.get(i)).state for i in ids} == {JobState.AVAILABLE}  # type: ignore[union-attr]
    entries = await client._store.audit_list(10)
    assert sorted(e.count for e in entries) == [2, 4, 4]
    assert {e.detail["run"] for e in entries} == {match.group(1)}
    assert (await http.get("/jobs/all/runs/nosuchrun")).status_code == 404


async def test_a_stopped_run_finishes_the_rest_within_its_bounds(make_http: MakeHttp,
                                                                 client: Client) -> None:
    app = create_app(client)
    dashboard, http = _dashboard(app, 4), make_http(app=app)
    ids = await fail_jobs(client, 10)
    confirm = await http.get("/jobs/all/requeue?state=failed")
    gate, _ = _gated(client, fail_on=2)
    gate.set()
    response = await http.post("/jobs/all/requeue", data=hidden_fields(confirm.text))
    match = RUN.search(response.headers["location"])
    assert match, response.headers["location"]
    await asyncio.wait(  # the run ended with the injected error
        {dashboard.bulk_runs.get(match.group(1)).task}, timeout=10)
    page = (await http.get(f"/jobs/all/runs/{match.group(1)}")).text
    assert "Stopped after 1 batch: StoreError: jobs_requeue: connection lost" in page
    states = [(await client.get(i)).state for i in ids]  # type: ignore[union-attr]
    assert states.count(JobState.AVAILABLE) == 4  # the first batch, whole
    later = await fail_jobs(client, 1, queue="other")  # fails after the confirmation
    fields = hidden_fields(page)
    assert fields["max_id"] == str(max(ids))
    dashboard.bulk_wait = 5.0
    delattr(client._store, "jobs_requeue")  # the store answers again
    resumed = await http.post("/jobs/all/requeue", data=fields)
    assert resumed.headers["location"].endswith("done=requeue&n=6")
    assert {(await client.get(i)).state for i in ids} == {JobState.AVAILABLE}  # type: ignore[union-attr]
    assert (await client.get(later[0])).state is JobState.FAILED  # type: ignore[union-attr]
