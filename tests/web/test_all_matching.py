"""Cancel or delete (or requeue) every job matching a listing's filter, through a
confirmation that shows how many and binds the action to exactly those: jobs that
arrive or finish after the page was shown are left alone, and the audit says so."""

from __future__ import annotations

import html

import httpx

from kiln import Client
from kiln._model._job import JobState
from tests.support.web import fail_jobs, hidden_fields


async def test_delete_all_matching_deletes_what_it_showed(http: httpx.AsyncClient,
                                                          client: Client) -> None:
    shown = await fail_jobs(client, 3, queue="mail")
    other = await fail_jobs(client, 1, queue="reports", kind="report.build")
    listing = (await http.get("/jobs?state=failed&queue=mail")).text
    assert 'id="delete-all" href="/jobs/all/delete?state=failed&amp;queue=mail"' in listing
    assert 'id="cancel-all"' not in listing  # failed jobs cannot be cancelled
    confirm = await http.get("/jobs/all/delete?state=failed&queue=mail")
    assert '<strong id="confirm-count">3</strong>' in confirm.text
    assert "gone for good" in confirm.text
    said = html.unescape(confirm.text)
    assert f"jobs up to <strong>#{max(shown)}</strong> that finished by" in said
    later = await fail_jobs(client, 1, queue="mail")  # fails while the page is read
    response = await http.post("/jobs/all/delete", data=hidden_fields(confirm.text))
    assert response.status_code == 303
    assert response.headers["location"].endswith("done=delete&n=3")
    assert [await client.get(i) for i in shown] == [None] * 3
    assert None not in [await client.get(i) for i in later + other]
    [entry] = await client._store.audit_list(10)
    assert (entry.action, entry.count, entry.detail["max_id"]) == ("delete", 3, max(shown))


async def test_cancel_all_matching_on_every_tab_that_allows_it(http: httpx.AsyncClient,
                                                               client: Client) -> None:
    ids = [await client.enqueue("email.send", {"i": i}, queue="mail") for i in range(3)]
    kept = await client.enqueue("report.build", {}, queue="mail")
    failed = await fail_jobs(client, 1, queue="other", kind="email.send")
    confirm = await http.get("/jobs/all/cancel?kind=email.send")  # the "all" tab
    assert '<strong id="confirm-count">3</strong>' in confirm.text  # not the failed one
    assert "available" in confirm.text and "running" in confirm.text
    fields = hidden_fields(confirm.text)
    assert fields["kind"] == "email.send" and "finished_before" not in fields
    newer = await client.enqueue("email.send", {}, queue="mail")  # after the page
    response = await http.post("/jobs/all/cancel", data=fields)
    assert response.headers["location"].endswith("done=cancel&n=3")
    states = {i: (await client.get(i)).state for i in [*ids, kept, newer, *failed]}  # type: ignore[union-attr]
    assert [states[i] for i in ids] == [JobState.CANCELLED] * 3
    assert states[kept] is states[newer] is JobState.AVAILABLE
    assert states[failed[0]] is JobState.FAILED


async def test_bad_all_matching_requests_change_nothing(http: httpx.AsyncClient,
                                                        client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    assert (await http.get("/jobs/all/cancel?state=failed")).status_code == 400
    assert "cannot be cancelled" in (await http.get("/jobs/all/cancel?state=failed")).text
    assert (await http.get("/jobs/all/explode")).status_code == 404
    confirm = await http.get("/jobs/all/delete?state=failed")
    fields = hidden_fields(confirm.text)
    del fields["max_id"]
    refused = await http.post("/jobs/all/delete", data=fields)
    assert refused.status_code == 400 and "carries no bound" in refused.text
    no_csrf = {k: v for k, v in hidden_fields(confirm.text).items() if k != "csrf"}
    assert (await http.post("/jobs/all/delete", data=no_csrf)).status_code == 403
    assert await client.get(job_id) is not None
    assert await client._store.audit_list(10) == [] or all(
        e.count == 0 for e in await client._store.audit_list(10))
