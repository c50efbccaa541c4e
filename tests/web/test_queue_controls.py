"""The queues page's controls: pause, resume and concurrency, CSRF-checked and audited."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx

from kiln import Client
from kiln._job import ServerInfo
from tests.web.conftest import csrf_of, post_form


async def _serve(client: Client, server_id: str = "srv-1", queue: str = "mail") -> None:
    await client.store.server_register(ServerInfo(
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
    assert (await client.store.queue_controls()).paused("mail")
    response = await post_form(http, "/queues", "/queues/control",
                               {"queue": "mail", "action": "resume"})
    assert response.headers["location"] == "/queues?done=resume&n=1"
    assert not (await client.store.queue_controls()).paused("mail")
    audit = [(e.action, e.actor, e.detail) for e in await client.store.audit_list(5)]
    assert audit[0][:1] == ("queue_resume",) and audit[1][0] == "queue_pause"
    assert audit[1][2] == {"queue": "mail"} and audit[1][1]  # who: the dashboard's actor
    assert "queue_pause" in (await http.get("/audit")).text


async def test_pause_every_queue(http: httpx.AsyncClient, client: Client) -> None:
    await _serve(client)
    await post_form(http, "/queues", "/queues/control", {"queue": "*", "action": "pause"})
    page = await http.get("/queues")
    assert 'id="paused-all"' in page.text and "(all queues)" in page.text
    await post_form(http, "/queues", "/queues/control", {"queue": "*", "action": "resume"})
    assert (await client.store.queue_controls()).pauses == ()


async def test_concurrency_for_every_server_and_for_one(http: httpx.AsyncClient,
                                                       client: Client) -> None:
    await _serve(client, "srv-1")
    await _serve(client, "srv-2")
    response = await post_form(http, "/queues", "/queues/control",
                               {"queue": "mail", "action": "concurrency", "concurrency": "2"})
    assert response.headers["location"] == "/queues?done=concurrency&n=1"
    await post_form(http, "/queues", "/queues/control", {
        "queue": "mail", "action": "concurrency", "concurrency": "1", "server": "srv-2"})
    controls = await client.store.queue_controls()
    assert controls.limit_of("mail", "srv-1", 4) == 2 and controls.limit_of("mail", "srv-2", 4) == 1
    page = await http.get("/queues")
    assert 'title="srv-1=2 srv-2=1 "' in page.text and ">3</td>" in page.text


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
    controls = await client.store.queue_controls()
    assert controls.pauses == () and controls.limits == ()
    # the refused forgery is audited as such; no control was
    assert not [e for e in await client.store.audit_list() if e.action.startswith("queue_")]
