"""Issue 44, the small items: a time value longer than a time is refused, not cut
(N11); requeue-all without a tab is refused (N10); the list note says the order it
shows and that tab counts ignore the time filter (N9); a long message without spaces
keeps its text in the timeline (N8); every page names an icon (N13, no favicon 404)."""

from __future__ import annotations

import httpx

from kiln import Client
from tests.support.web import fail_jobs, hidden_fields, post_form


async def test_a_too_long_time_is_refused_not_cut(http: httpx.AsyncClient) -> None:
    long = "2026-12-06T10:00:00.000000000000000000000000000+14:00"
    response = await http.get("/jobs", params={"since": long})
    assert response.status_code == 400 and "a time has at most 40" in response.text
    assert (await http.get("/jobs", params={"since": "2026-12-06T10:00:00+14:00"})
            ).status_code == 200


async def test_requeue_all_needs_a_tab(http: httpx.AsyncClient, client: Client) -> None:
    await fail_jobs(client, 1)
    refused = await http.get("/jobs/all/requeue")
    assert refused.status_code == 400 and "would run completed jobs again" in refused.text
    confirm = await http.get("/jobs/all/requeue?state=failed")
    fields = {k: v for k, v in hidden_fields(confirm.text).items() if k != "state"}
    assert (await http.post("/jobs/all/requeue", data=fields)).status_code == 400


async def test_the_list_note_says_what_it_shows(http: httpx.AsyncClient,
                                                client: Client) -> None:
    await fail_jobs(client, 1)
    oldest = (await http.get("/jobs?order=oldest")).text
    assert '<p class="note" id="list-note">Oldest first.' in oldest
    timed = (await http.get("/jobs?state=failed&since=1h")).text
    assert "do not apply the kind, error, tag, metadata, args and time filters" in timed
    assert "Newest first." in (await http.get("/jobs")).text


async def test_a_long_message_keeps_its_text_in_the_timeline(http: httpx.AsyncClient,
                                                             client: Client) -> None:
    [job_id] = await fail_jobs(client, 1, error="RuntimeError: " + "H" * 500)
    page = (await http.get(f"/jobs/{job_id}")).text
    assert "RuntimeError: HHHHHHHH" in page.split('class="step-error"')[1][:400]


async def test_every_page_names_an_icon(http: httpx.AsyncClient) -> None:
    assert '<link rel="icon" href="data:,">' in (await http.get("/")).text


async def test_running_jobs_of_unregistered_servers_are_listed(
        http: httpx.AsyncClient, client: Client) -> None:
    """N12: a running job whose server was pruned was counted but shown nowhere."""
    job_id = await client.enqueue("email.send", {}, queue="mail")
    [row] = await client._store.job_claim("mail", ["email.send"], 1, "pruned-server")
    assert row.id == job_id
    page = (await http.get("/servers")).text
    assert "No server is registered." in page  # and still the job is listed
    section = page.split('id="running-unregistered"')[1]
    assert f'href="/jobs/{job_id}"' in section and "<code>pruned-server</code>" in section


async def test_a_bulk_action_returns_to_the_same_time_range_and_order(
        http: httpx.AsyncClient, client: Client) -> None:
    """N9: the selection form kept queue, kind and error but dropped since, until
    and order, so the operator came back to another listing."""
    [job_id] = await fail_jobs(client, 1)
    listing = "/jobs?state=failed&queue=mail&since=1h&order=oldest"
    fields = hidden_fields((await http.get(listing)).text)
    assert fields["since"] == "1h" and fields["order"] == "oldest"
    response = await http.post("/jobs/bulk", data={**fields, "ids": str(job_id),
                                                   "action": "requeue"})
    location = response.headers["location"]
    assert "since=1h" in location and "order=oldest" in location and "n=1" in location


async def test_concurrency_takes_ascii_digits_only(http: httpx.AsyncClient,
                                                   client: Client) -> None:
    """N13: int() read full-width "10" and "1_0" as 10."""
    await client.enqueue("email.send", {}, queue="mail")
    for text in ("\uff11\uff10", "1_0", "+5"):  # full-width 10
        response = await post_form(http, "/queues", "/queues/control", {
            "queue": "mail", "action": "concurrency", "concurrency": text})
        assert response.status_code == 400 and "whole number" in response.text, text


async def test_a_bulk_requeue_says_which_jobs_it_held(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    """N10: a selection with a job cancelled while running (its attempt may still run)
    said "1 job requeued." or "none matched in a state that allows it"."""
    from kiln._model._job import JobFilter
    from tests.stores.factories import server

    await client._store.server_register(server("srv-alive", {"mail": 2}))
    running = await client.enqueue("email.send", {}, queue="mail")
    [row] = await client._store.job_claim("mail", ["email.send"], 1, "srv-alive")
    assert row.id == running
    idle = await client.enqueue("email.send", {}, queue="mail")
    await client.cancel(JobFilter(ids=(running, idle)))
    fields = hidden_fields((await http.get("/jobs?state=cancelled")).text)
    response = await http.post("/jobs/bulk", data={**fields, "action": "requeue",
                                                   "ids": [str(running), str(idle)]})
    page = (await http.get(response.headers["location"])).text
    assert ("1 job requeued. 1 cancelled while running stays cancelled: its attempt may "
            "still be running") in page
