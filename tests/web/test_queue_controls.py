"""The queues page's controls: pause, resume and concurrency, CSRF-checked and audited."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx

from kiln import Client
from kiln._model._job import ServerInfo
from tests.support.web import csrf_of, post_form


async def _serve(client: Client, server_id: str = "srv-1", queue: str = "mail") -> None:
    await client._store.server_register(ServerInfo(
        id=server_id, host="h", pid=1, queues={queue: 4}, kinds=["email.send"],
        version="test", started_at=datetime.now(UTC),
    ))


async def test_pause_and_resume_from_the_queues_page(http: httpx.AsyncClient,
                                                     client: Client) -> None:
    await _serve(client)
    page = await http.get("/queues")
    assert 'data-action="pause" data-queue="mail"' in page.text
    assert re.search(r'data-confirm="Pause queue mail\?[^"]+"', page.text)
    response = await post_form(http, "/queues", "/queues/control",
                               {"queue": "mail", "action": "pause"})
    assert response.status_code == 303
    assert response.headers["location"] == "/queues?done=pause&n=1"
    shown = await http.get(response.headers["location"])
    assert "Paused: its servers claim nothing more" in shown.text
    assert "state-paused" in shown.text and 'data-action="resume"' in shown.text
    assert (await client._store.queue_controls()).paused("mail")
    response = await post_form(http, "/queues", "/queues/control",
                               {"queue": "mail", "action": "resume"})
    assert response.headers["location"] == "/queues?done=resume&n=1"
    assert not (await client._store.queue_controls()).paused("mail")
    audit = [(e.action, e.actor, e.detail) for e in await client._store.audit_list(5)]
    assert audit[0][:1] == ("queue_resume",) and audit[1][0] == "queue_pause"
    assert audit[1][2] == {"queue": "mail"} and audit[1][1]  # who: the dashboard's actor
    assert "queue_pause" in (await http.get("/audit")).text


async def test_pause_every_queue(http: httpx.AsyncClient, client: Client) -> None:
    await _serve(client)
    await post_form(http, "/queues", "/queues/control", {"queue": "*", "action": "pause"})
    page = await http.get("/queues")
    assert 'id="paused-all"' in page.text and "(all queues)" in page.text
    await post_form(http, "/queues", "/queues/control", {"queue": "*", "action": "resume"})
    assert (await client._store.queue_controls()).pauses == ()


async def test_concurrency_for_every_server_and_for_one(http: httpx.AsyncClient,
                                                       client: Client) -> None:
    await _serve(client, "srv-1")
    await _serve(client, "srv-2")
    response = await post_form(http, "/queues", "/queues/control",
                               {"queue": "mail", "action": "concurrency", "concurrency": "2"})
    assert response.headers["location"] == "/queues?done=concurrency&n=1"
    await post_form(http, "/queues", "/queues/control", {
        "queue": "mail", "action": "concurrency", "concurrency": "1", "server": "srv-2"})
    controls = await client._store.queue_controls()
    assert controls.limit_of("mail", "srv-1", 4) == 2 and controls.limit_of("mail", "srv-2", 4) == 1
    page = (await http.get("/queues")).text
    assert '<span class="running-limit">0 / 3</span>' in page
    assert '<span class="override-count">1 server override</span>' in page
    assert re.search(r'data-server="srv-1" data-running="0" data-limit="2"'
                     r' data-source="fleet">srv-1: 0 / 2 <em>set fleet-wide</em>', page)
    assert re.search(r'data-server="srv-2" data-running="0" data-limit="1"'
                     r' data-source="server">srv-2: 0 / 1 <em>set for this server</em>'
                     r' \(started with 4\)', page)


async def test_bad_input_is_refused_and_writes_nothing(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    await _serve(client)
    cases = [
        ({"queue": "nope", "action": "pause"}, "unknown queue"),
        ({"queue": "mail", "action": "explode"}, "unknown action"),
        ({"queue": "mail", "action": "concurrency", "concurrency": "-1"}, "between 0 and"),
        ({"queue": "mail", "action": "concurrency", "concurrency": "99999"}, "between 0 and"),
        ({"queue": "mail", "action": "concurrency", "concurrency": "lots"}, "whole number"),
        ({"queue": "mail", "action": "concurrency", "concurrency": "2", "server": "ghost"},
         "not registered"),
    ]
    for data, message in cases:
        response = await post_form(http, "/queues", "/queues/control", data)
        assert response.status_code == 400, (data, response.status_code)
        assert message in response.text, (data, message)
    token = csrf_of((await http.get("/queues")).text)
    forged = await http.post("/queues/control", data={"queue": "mail", "action": "pause",
                                                      "csrf": token[::-1]})
    assert forged.status_code == 403
    controls = await client._store.queue_controls()
    assert controls.pauses == () and controls.limits == ()
    # the refused forgery is audited as such; no control was
    assert not [e for e in await client._store.audit_list() if e.action.startswith("queue_")]


async def test_bad_input_is_shown_on_the_queues_page(http: httpx.AsyncClient,
                                                    client: Client) -> None:
    await _serve(client)
    response = await post_form(http, "/queues", "/queues/control", {
        "queue": "mail", "action": "concurrency", "concurrency": "<b>7</b>"})
    assert response.status_code == 400
    assert '<h1>Queues</h1>' in response.text and 'id="control-error"' in response.text
    assert "concurrency must be a whole number, got &#39;&lt;b&gt;7&lt;/b&gt;&#39;" \
        in response.text  # escaped: the page never echoes markup
    assert 'data-refresh=' not in response.text  # the error stays on screen
    assert 'tr data-queue="mail"' in response.text  # the controls, to try again


async def test_backlog_running_and_throughput_per_queue(http: httpx.AsyncClient,
                                                        client: Client) -> None:
    from kiln._model._job import JobResult, Outcome

    await _serve(client, "srv-1")
    await _serve(client, "srv-2", queue="other")
    for i in range(6):
        await client.enqueue("email.send", {"i": i}, queue="mail")
    await client.enqueue("email.send", {"later": True}, queue="mail", delay=3600)
    done = await client._store.job_claim("mail", ["email.send"], 3, "srv-1")
    await client._store.job_results_apply([
        JobResult(job_id=r.id, server_id="srv-1", attempt=r.attempt,
                  outcome=Outcome.COMPLETED) for r in done[:2]])
    await client._store.job_claim("mail", ["email.send"], 1, "gone")  # a dead server's
    await client.pause_queue("mail", actor="ops")
    await client.set_concurrency("mail", 2, server="srv-1", actor="ops")
    page = (await http.get("/queues")).text
    assert 'data-available="2" data-scheduled="1">' in page  # 6 - 3 - 1 claimed; 1 later
    assert '<span class="running-limit">1 / 2</span>' in page  # srv-1 runs 1 of 2
    assert "1 running on servers not alive" in page
    spark = re.search(r'<tr data-queue="mail">.*?data-values="([0-9,]+)"', page, re.S)
    assert spark is not None
    points = [int(v) for v in spark.group(1).split(",")]
    assert len(points) == 60 and sum(points) == 2 and sum(points[-2:]) == 2
    api = {q["name"]: q for q in (await http.get("/api/queues")).json()["queues"]}
    mail, other = api["mail"], api["other"]
    assert mail["paused"] is True and mail["paused_by"] == "ops"
    assert mail["paused_as"] == "mail" and mail["paused_since"]
    assert (mail["backlog"], mail["running"], mail["limit"]) == (3, 1, 2)
    assert mail["running_on_dead_servers"] == 1
    assert mail["servers"] == [{"id": "srv-1", "running": 1, "limit": 2, "configured": 4,
                                "limit_from": "server"}]
    assert sum(mail["completed_per_minute"]) == 2
    assert other["paused"] is False and other["paused_since"] is None
    assert other["paused_by"] is None
    assert (other["running"], other["limit"], other["servers"][0]["limit_from"]) == \
        (0, 4, "configured")
    await client.pause_queue("*", actor="ops")
    api = {q["name"]: q for q in (await http.get("/api/queues")).json()["queues"]}
    assert api["other"]["paused"] is True and api["other"]["paused_as"] == "*"
