"""Requeue-all does what its confirmation showed, no more (issue 21, defect 6): the page
binds the action to the jobs it counted (ids up to the newest, failed by the time it
was shown), and says so."""

from __future__ import annotations

import html
import time

import httpx

from kiln import Client
from kiln._model._job import AttemptError, JobResult, JobRow, JobState, Outcome
from tests.support.web import csrf_of, hidden_fields


async def _fail(client: Client, rows: list[JobRow]) -> None:
    await client._store.job_results_apply([
        JobResult(r.id, "srv", r.attempt, Outcome.FAILED,
                  error=AttemptError(r.attempt, time.time(), "SMTP timeout", "", "srv"))
        for r in rows])


async def _running(client: Client, n: int) -> list[JobRow]:
    for i in range(n):
        await client.enqueue("email.send", {"i": i}, queue="mail", max_attempts=1)
    return sorted(await client._store.job_claim("mail", ["email.send"], n, "srv"),
                  key=lambda r: r.id)


async def test_requeue_all_acts_on_the_jobs_it_showed(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    rows = await _running(client, 4)
    await _fail(client, [rows[-1]])  # the newest fails first: an id bound alone is not enough
    confirm = await http.get("/jobs/requeue-all?state=failed&queue=mail")
    assert '<strong id="confirm-count">1</strong>' in confirm.text
    said = html.unescape(confirm.text)
    assert f"jobs up to <strong>#{rows[-1].id}</strong> that failed by" in said
    assert "Jobs that fail after this page was shown stay failed" in said
    await _fail(client, rows[:-1])  # three more fail while the operator reads the page
    response = await http.post("/jobs/requeue-all", data=hidden_fields(confirm.text))
    assert response.status_code == 303
    assert response.headers["location"].endswith("done=requeue&n=1")
    states = [(await client.get(r.id)).state for r in rows]  # type: ignore[union-attr]
    assert states == [JobState.FAILED] * 3 + [JobState.AVAILABLE]
    [entry] = await client._store.audit_list(10)
    assert (entry.action, entry.count, entry.detail["max_id"]) == ("requeue", 1, rows[-1].id)
    assert "finished_before" in entry.detail

    again = await http.get("/jobs/requeue-all?state=failed&queue=mail")  # a fresh look
    assert '<strong id="confirm-count">3</strong>' in again.text


async def test_a_confirmation_without_its_bound_is_refused(http: httpx.AsyncClient,
                                                           client: Client) -> None:
    rows = await _running(client, 1)
    await _fail(client, rows)
    confirm = await http.get("/jobs/requeue-all?state=failed")
    token = csrf_of(confirm.text)
    for extra, message in (({}, "carries no bound (max_id)"),
                           ({"max_id": "-1"}, "max_id must be between"),
                           ({"max_id": "5", "finished_before": "yesterday"}, "ISO 8601"),
                           ({"max_id": "5", "finished_before": "2026-12-03T09:00:00"},
                            "time zone")):
        response = await http.post("/jobs/requeue-all",
                                   data={"state": "failed", "csrf": token, **extra})
        assert response.status_code == 400, extra
        assert message in html.unescape(response.text), extra
    assert (await client.get(rows[0].id)).state is JobState.FAILED  # type: ignore[union-attr]
