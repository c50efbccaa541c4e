"""Issue 44 N8: the timeline shows each requeue (who and when, from the audit) and the
run after it, numbered across requeues; before, a requeue reset the attempt number and
the run after it was hidden as "attempt 1 already recorded"."""

from __future__ import annotations

import html
import time

import httpx

from kiln import Client
from kiln._model._job import AttemptError, JobResult, JobState, Outcome
from tests.support.web import fail_jobs, post_form


async def _run_to(client: Client, job_id: int, outcome: Outcome) -> None:
    [row] = await client._store.job_claim("mail", ["email.send"], 1, "web-test-server")
    assert row.id == job_id
    error = None if outcome is Outcome.COMPLETED else AttemptError(
        row.attempt, time.time() + 0.01, "again", "tb", "web-test-server")
    applied = await client._store.job_results_apply([JobResult(
        job_id=job_id, server_id="web-test-server", attempt=row.attempt, outcome=outcome,
        error=error)])
    assert applied.applied == 1


def _events(steps: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(s["event"], s.get("attempt"), s.get("run")) for s in steps]


async def test_a_requeue_and_the_run_after_it_are_on_the_timeline(
        http: httpx.AsyncClient, client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    done = await post_form(http, f"/jobs/{job_id}", f"/jobs/{job_id}/requeue", {})
    assert done.status_code == 303
    waiting = (await http.get(f"/api/jobs/{job_id}")).json()["timeline"]
    assert _events(waiting) == [("enqueued", None, None), ("attempt", 1, 1),
                                ("requeued", None, None), ("next", 1, None)]
    assert waiting[2]["actor"].startswith("dashboard:") and waiting[2]["at"] > 0
    await _run_to(client, job_id, Outcome.COMPLETED)
    steps = (await http.get(f"/api/jobs/{job_id}")).json()["timeline"]
    assert _events(steps) == [("enqueued", None, None), ("attempt", 1, 1),
                              ("requeued", None, None), ("attempt", 1, 2),
                              ("completed", None, None)]
    page = html.unescape((await http.get(f"/jobs/{job_id}")).text)
    assert "requeued by dashboard:" in page and "attempt 1 (run 2)" in page


async def test_two_requeues_number_every_run(http: httpx.AsyncClient, client: Client) -> None:
    """Requeued by a script (no audit entry naming it): the step is there, its time
    the one the requeue set (the run's due time) or unknown."""
    [job_id] = await fail_jobs(client, 1)
    from kiln._model._job import JobFilter

    assert await client._store.jobs_requeue(JobFilter(ids=(job_id,))) == 1
    await _run_to(client, job_id, Outcome.FAILED)
    assert await client._store.jobs_requeue(JobFilter(ids=(job_id,))) == 1
    await _run_to(client, job_id, Outcome.COMPLETED)
    row = await client.get(job_id)
    assert row is not None and row.state is JobState.COMPLETED
    steps = (await http.get(f"/api/jobs/{job_id}")).json()["timeline"]
    assert _events(steps) == [
        ("enqueued", None, None), ("attempt", 1, 1), ("requeued", None, None),
        ("attempt", 1, 2), ("requeued", None, None), ("attempt", 1, 3),
        ("completed", None, None)]
    assert "actor" not in steps[2] and "actor" not in steps[4]


async def test_a_completed_job_requeued_shows_the_requeue_from_the_audit(
        http: httpx.AsyncClient, client: Client) -> None:
    """A completion leaves no record: the audit entry alone says it was requeued."""
    job_id = await client.enqueue("email.send", {}, queue="mail")
    await _run_to(client, job_id, Outcome.COMPLETED)
    done = await post_form(http, f"/jobs/{job_id}", f"/jobs/{job_id}/requeue", {})
    assert done.status_code == 303
    await _run_to(client, job_id, Outcome.COMPLETED)
    steps = (await http.get(f"/api/jobs/{job_id}")).json()["timeline"]
    assert [s["event"] for s in steps] == ["enqueued", "requeued", "attempt", "completed"]
    assert steps[1]["actor"].startswith("dashboard:")
    assert steps[1]["at"] <= steps[2]["at"]
