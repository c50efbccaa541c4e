"""Actions through the dashboard: one job, a selection, and requeue-all after confirming."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from kiln import Client
from kiln._model._job import JobResult, JobState, Outcome
from tests.support.web import csrf_of, fail_jobs, hidden_fields, post_form


async def _state(client: Client, job_id: int) -> JobState | None:
    row = await client.get(job_id)
    return None if row is None else row.state


async def test_requeue_cancel_delete_one_job(http: httpx.AsyncClient, client: Client) -> None:
    [failed] = await fail_jobs(client, 1)
    response = await post_form(http, f"/jobs/{failed}", f"/jobs/{failed}/requeue", {})
    assert response.status_code == 303
    assert response.headers["location"] == f"/jobs/{failed}?done=requeue&n=1"
    assert await _state(client, failed) is JobState.AVAILABLE
    page = await http.get(response.headers["location"])
    assert "1 job requeued." in page.text

    response = await post_form(http, f"/jobs/{failed}", f"/jobs/{failed}/cancel", {})
    assert await _state(client, failed) is JobState.CANCELLED
    response = await post_form(http, f"/jobs/{failed}", f"/jobs/{failed}/delete", {})
    assert response.headers["location"] == "/jobs?done=delete&n=1"
    assert await _state(client, failed) is None
    actions = [(e.action, e.count) for e in await client._store.audit_list(10)]
    assert actions == [("delete", 1), ("cancel", 1), ("requeue", 1)]


async def test_an_action_that_changes_nothing_says_so(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    job_id = await client.enqueue("k", {}, queue="q")
    [row] = await client._store.job_claim("q", ["k"], 1, "srv")
    response = await post_form(http, f"/jobs/{job_id}", f"/jobs/{job_id}/delete", {})
    assert response.headers["location"] == f"/jobs/{job_id}?done=delete&n=0"
    assert "No job was deleted" in (await http.get(response.headers["location"])).text
    assert await _state(client, row.id) is JobState.RUNNING


async def test_unknown_action_and_bad_selection(http: httpx.AsyncClient, client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    page = await http.get(f"/jobs/{job_id}")
    token = csrf_of(page.text)
    assert (await http.post(f"/jobs/{job_id}/explode", data={"csrf": token})).status_code == 404
    cases: list[tuple[dict[str, Any], str]] = [
        ({"action": "requeue"}, "select at least one job"),
        ({"action": "requeue", "ids": "abc"}, "job id must be a whole number"),
        ({"action": "explode", "ids": str(job_id)}, "unknown action"),
        ({"action": "requeue", "ids": str(job_id), "state": "bogus"}, "unknown state"),
        ({"action": "requeue", "ids": [str(i) for i in range(1, 1002)]}, "at most 1000"),
    ]
    for data, message in cases:
        response = await http.post("/jobs/bulk", data={**data, "csrf": token})
        assert response.status_code == 400, data
        assert message in html.unescape(response.text)
    assert await _state(client, job_id) is JobState.FAILED


async def test_selection(http: httpx.AsyncClient, client: Client) -> None:
    ids = await fail_jobs(client, 4)
    chosen = ids[:2]
    response = await post_form(
        http, "/jobs?state=failed", "/jobs/bulk",
        {"action": "requeue", "ids": [str(i) for i in chosen], "state": "failed",
         "queue": "mail"},
    )
    assert response.status_code == 303
    assert response.headers["location"] == "/jobs?state=failed&queue=mail&done=requeue&n=2"
    assert [await _state(client, i) for i in ids] == [JobState.AVAILABLE] * 2 + [
        JobState.FAILED] * 2
    page = (await http.get(response.headers["location"])).text
    assert sorted(int(x) for x in re.findall(r'name="ids" value="(\d+)"', page)) == ids[2:]
    [entry] = await client._store.audit_list(10)
    assert (entry.action, entry.count, sorted(entry.detail["ids"])) == ("requeue", 2, chosen)


async def test_requeue_all_confirms_the_count_then_requeues_in_one_operation(
    http: httpx.AsyncClient, client: Client
) -> None:
    smtp = await fail_jobs(client, 3, queue="mail", error="SMTP timeout")
    dns = await fail_jobs(client, 2, queue="mail", error="DNS failure")
    elsewhere = await fail_jobs(client, 1, queue="sms", kind="sms.send", error="SMTP timeout")
    child = await client.enqueue("report.build", {}, queue="reports", depends_on=smtp)
    tab = await http.get("/jobs?state=failed&queue=mail&error=smtp")
    link = re.search(r'id="requeue-all" href="([^"]+)"', tab.text)
    assert link is not None
    confirm = await http.get(html.unescape(link.group(1)))
    assert confirm.status_code == 200
    assert '<strong id="confirm-count">3</strong>' in confirm.text
    assert [await _state(client, i) for i in smtp] == [JobState.FAILED] * 3  # nothing yet
    fields = hidden_fields(confirm.text)
    assert {k: fields[k] for k in ("state", "queue", "error")} == {
        "state": "failed", "queue": "mail", "error": "smtp"}
    response = await http.post("/jobs/requeue-all", data=fields)
    assert response.status_code == 303
    assert response.headers["location"] == \
        "/jobs?state=failed&queue=mail&error=smtp&done=requeue&n=3"
    assert [await _state(client, i) for i in smtp] == [JobState.AVAILABLE] * 3
    assert [await _state(client, i) for i in dns + elsewhere] == [JobState.FAILED] * 3
    after = await http.get(response.headers["location"])
    assert "3 jobs requeued." in after.text and "No jobs here matching" in after.text
    [entry] = await client._store.audit_list(10)  # one operation, one audit entry
    assert (entry.action, entry.count) == ("requeue", 3)
    assert entry.detail["queue"] == "mail" and entry.detail["error"] == "smtp"
    assert "requeue" in (await http.get("/audit")).text

    # the requeued jobs complete, and what waited on them becomes available
    assert await _state(client, child) is JobState.AWAITING
    rows = await client._store.job_claim("mail", ["email.send"], 10, "srv")
    assert sorted(r.id for r in rows) == smtp
    await client._store.job_results_apply(
        [JobResult(r.id, "srv", r.attempt, Outcome.COMPLETED) for r in rows])
    assert await _state(client, child) is JobState.AVAILABLE


async def test_requeue_all_with_nothing_matching(http: httpx.AsyncClient, client: Client) -> None:
    await fail_jobs(client, 1, error="SMTP timeout")
    confirm = await http.get("/jobs/requeue-all?state=failed&error=nothing-like-this")
    assert "No failed job matches this filter." in confirm.text
    assert 'id="confirm-requeue"' not in confirm.text


async def test_counts_follow_an_action_at_once(http: httpx.AsyncClient, client: Client) -> None:
    ids = await fail_jobs(client, 2)
    tab = (await http.get("/jobs?state=failed")).text
    assert re.search(r'Failed <span class="count">2</span>', tab)
    await post_form(http, "/jobs?state=failed", "/jobs/bulk",
                    {"action": "delete", "ids": [str(i) for i in ids]})
    tab = (await http.get("/jobs?state=failed")).text
    assert re.search(r'Failed <span class="count">0</span>', tab)


async def test_cancelling_a_running_job_says_its_handler_is_stopped(
    http: httpx.AsyncClient, client: Client
) -> None:
    job_id = await client.enqueue("k", {}, queue="q")
    await client._store.job_claim("q", ["k"], 1, "srv")
    page = await http.get(f"/jobs/{job_id}")
    assert f'action="/jobs/{job_id}/cancel"' in page.text  # the button covers running jobs
    response = await post_form(http, f"/jobs/{job_id}", f"/jobs/{job_id}/cancel", {})
    assert response.headers["location"] == f"/jobs/{job_id}?done=cancel&n=1&running=1"
    shown = (await http.get(response.headers["location"])).text
    assert "It was running: its server stops the handler" in shown
    row = await client.get(job_id)
    assert row is not None and row.state is JobState.CANCELLED
    assert row.errors[-1].error.startswith("Cancelled by ")  # the signed-in actor

    response = await post_form(http, f"/jobs/{job_id}", f"/jobs/{job_id}/cancel", {})
    assert response.headers["location"] == f"/jobs/{job_id}?done=cancel&n=0&finished=cancelled"
    shown = (await http.get(response.headers["location"])).text
    assert "Not cancelled: the job had finished already (cancelled)." in shown
