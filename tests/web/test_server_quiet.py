"""Issue 44, fleet at a glance: the servers page shows each server's running jobs,
concurrency (limits applied), heartbeat age and version, and "Quiet" stops one server
claiming (its own concurrency 0 on each of its queues: a control row it obeys like a
pause) until "Wake", audited like every action. The overview lists paused queues and
limits, with a check of their own. Checked against a real server in this process."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime

import httpx

import kiln
from kiln import Client
from kiln._model._job import JobFilter, JobState, ServerInfo
from kiln.web import create_app
from tests.integration.inprocess import Running, config, open_store
from tests.support.waits import wait_for
from tests.support.web import BASE_URL, MakeHttp, post_form


def _row(page: str, server_id: str) -> str:
    return page.split(f'data-server="{server_id}"', 1)[1].split("</tr>", 1)[0]


async def test_quiet_stops_a_server_claiming_until_woken(store_url: str) -> None:
    app = kiln.App(store_url)

    @app.job("pay", queue="payments")
    async def pay(job: kiln.Job) -> None:
        pass

    store = await open_store(store_url)
    client = Client(store)
    # beats of 1 s (fenced after 3 s, not 0.6): on a loaded machine a server that missed
    # the fast settings' window rejoined under a new id, and the rows below are by id
    slow_beat = config(heartbeat_interval=1.0, leader_ttl=3.0, dead_after=10.0)
    running = await Running(app.server({"payments": 3}, slow_beat)).started()
    server_id = running.server.id
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(client)),
                             base_url=BASE_URL)
    try:
        page = (await http.get("/servers")).text
        row = _row(page, server_id)
        assert re.search(r'class="num concurrency">3<', row)
        assert 'class="num running-n">0<' in row and kiln.__version__ in row
        assert 'value="quiet"' in row and "quiet</span>" not in row

        response = await post_form(http, "/servers", "/servers/control",
                                   {"server": server_id, "action": "quiet"})
        assert response.status_code == 303
        assert response.headers["location"] == "/servers?done=quiet&n=1"
        await wait_for(lambda: running.server.stats().queues["payments"].concurrency == 0,
                       20, "the server to take its concurrency 0")
        shown = (await http.get(response.headers["location"])).text
        assert "Quiet: it claims no new job on its 1 queue" in shown
        row = _row(shown, server_id)
        assert "quiet</span>" in row and 'value="wake"' in row
        assert re.search(r'class="num concurrency">0 <small title="as started">of 3<', row)
        [entry] = [e for e in await client.audit(10) if e.detail.get("queue") == "payments"]
        assert entry.actor  # who quieted it
        # the overview lists the limit with the server it holds for
        overview = (await http.get("/")).text
        assert 'id="controlled"' in overview and f"<code>{server_id}</code>" in overview

        # a quiet server claims nothing: a job waits while it is quiet, runs once woken
        job_id = await client.enqueue("pay", {}, queue="payments")
        await asyncio.sleep(1.0)  # several of the test config's poll intervals
        assert (await client.get(job_id)).state is JobState.AVAILABLE  # type: ignore[union-attr]
        response = await post_form(http, "/servers", "/servers/control",
                                   {"server": server_id, "action": "wake"})
        assert response.headers["location"] == "/servers?done=wake&n=1"

        async def done() -> bool:
            row = await client.get(job_id)
            return row is not None and row.state is JobState.COMPLETED

        await wait_for(done, 20, "the job to run once the server was woken")
        assert "quiet</span>" not in _row((await http.get("/servers")).text, server_id)
    finally:
        await http.aclose()
        await running.stop()
        await store.close()


async def test_overview_shows_paused_queues_and_limits(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    for sid in ("srv-1", "srv-2"):
        await client._store.server_register(ServerInfo(
            id=sid, host="h", pid=1, queues={"mail": 4, "reports": 2}, kinds=[],
            version="test", started_at=datetime.now(UTC)))
    page = (await http.get("/")).text
    assert 'id="controlled"' not in page and "none paused" in page
    await client.pause_queue("mail", actor="alice")
    await client.set_concurrency("reports", 1, actor="bob")
    await client.set_concurrency("reports", 0, server="srv-2", actor="bob")
    page = (await http.get("/")).text
    assert re.search(r'check-warn"><strong>paused queues</strong><span>1 paused: mail<', page)
    rows = re.findall(r'<tr class="controlled( paused)?">(.*?)</tr>', page, re.S)
    assert [(bool(p), re.sub(r"<[^>]+>|\s+", " ", r).split()[0]) for p, r in rows] == [
        (True, "mail"), (False, "reports")]
    assert "by alice" in rows[0][1]
    assert re.search(r'<td class="num">1</td>\s*<td><span class="pair"><code>srv-2</code>'
                     r'<span class="n">=0</span>', rows[1][1])
    # and unknown servers or actions write nothing
    bad = await post_form(http, "/servers", "/servers/control",
                          {"server": "ghost", "action": "quiet"})
    assert bad.status_code == 400 and "is not registered" in bad.text
    bad = await post_form(http, "/servers", "/servers/control",
                          {"server": "srv-1", "action": "reboot"})
    assert bad.status_code == 400
    assert (await client.count(JobFilter())) == 0


async def test_read_only_shows_no_quiet_and_refuses_it(make_http: MakeHttp,
                                                      client: Client) -> None:
    await client._store.server_register(ServerInfo(
        id="srv-1", host="h", pid=1, queues={"mail": 4}, kinds=[], version="test",
        started_at=datetime.now(UTC)))
    http = make_http(read_only=True)
    page = await http.get("/servers")
    assert page.status_code == 200 and 'class="num concurrency">4<' in page.text
    assert "/servers/control" not in page.text and 'value="quiet"' not in page.text
    refused = await http.post("/servers/control", data={"server": "srv-1", "action": "quiet"})
    assert refused.status_code == 403
    assert (await client.queue_controls()).limits == ()


async def test_wake_restores_the_limits_before_quiet_even_after_a_restart(
        make_http: MakeHttp, client: Client) -> None:
    await client._store.server_register(ServerInfo(
        id="srv-1", host="h", pid=1, queues={"mail": 4, "reports": 2, "sms": 3}, kinds=[],
        version="test", started_at=datetime.now(UTC)))
    await client.set_concurrency("mail", 2, server="srv-1", actor="alice")  # its own limit
    await client.set_concurrency("sms", 1, actor="alice")  # a fleet-wide one
    http = make_http()
    [server] = (await http.get("/api/servers")).json()["servers"]
    assert (server["concurrency"], server["configured"], server["quiet"]) == (5, 9, False)
    assert server["concurrency_by_queue"] == {"mail": 2, "reports": 2, "sms": 1}
    assert server["running_count"] == 0
    assert set(server) == {  # as docs/dashboard.md documents /api/servers
        "id", "host", "pid", "queues", "kinds", "version", "started_at", "heartbeat_at",
        "heartbeat_age", "connections", "leader", "alive", "concurrency", "configured",
        "concurrency_by_queue", "quiet", "running_count", "running"}

    quiet = await post_form(http, "/servers", "/servers/control",
                            {"server": "srv-1", "action": "quiet"})
    assert quiet.headers["location"] == "/servers?done=quiet&n=3"
    [server] = (await http.get("/api/servers")).json()["servers"]
    assert (server["concurrency"], server["quiet"]) == (0, True)
    [entry] = await client.audit(1, action="server-quiet")
    assert entry.detail["server"] == "srv-1" and entry.actor.startswith("dashboard:")
    assert entry.detail["before"] == {"mail": 2, "reports": None, "sms": None}
    # quieting a quiet server writes nothing (it would lose the limits kept above)
    again = await post_form(http, "/servers", "/servers/control",
                            {"server": "srv-1", "action": "quiet"})
    assert again.headers["location"] == "/servers?done=quiet&n=0"
    assert "Already quiet: nothing changed." in (await http.get(again.headers["location"])).text
    assert len(await client.audit(10, action="server-quiet")) == 1

    # a new dashboard process (nothing kept in memory) wakes it: the limits come back
    restarted = make_http()
    woken = await post_form(restarted, "/servers", "/servers/control",
                            {"server": "srv-1", "action": "wake"})
    assert woken.headers["location"] == "/servers?done=wake&n=3"
    [server] = (await restarted.get("/api/servers")).json()["servers"]
    assert server["concurrency_by_queue"] == {"mail": 2, "reports": 2, "sms": 1}
    assert (server["concurrency"], server["quiet"]) == (5, False)
    own = {(lim.queue, lim.server_id): lim.concurrency
           for lim in (await client.queue_controls()).limits}
    assert own == {("mail", "srv-1"): 2, ("sms", ""): 1}
    [wake] = await client.audit(1, action="server-wake")
    assert wake.detail["restored"] == {"mail": 2, "reports": None, "sms": None}


async def test_wake_leaves_a_limit_changed_while_quiet(make_http: MakeHttp,
                                                      client: Client) -> None:
    await client._store.server_register(ServerInfo(
        id="srv-1", host="h", pid=1, queues={"mail": 4, "reports": 2}, kinds=[],
        version="test", started_at=datetime.now(UTC)))
    await client.set_concurrency("mail", 3, server="srv-1")
    http = make_http()
    await post_form(http, "/servers", "/servers/control", {"server": "srv-1", "action": "quiet"})
    await client.set_concurrency("reports", 1, server="srv-1")  # by hand, while quiet
    await post_form(http, "/servers", "/servers/control", {"server": "srv-1", "action": "wake"})
    own = {lim.queue: lim.concurrency for lim in (await client.queue_controls()).limits}
    assert own == {"mail": 3, "reports": 1}
    # a second quiet and wake restore what it had then, not the first quiet's limits
    await post_form(http, "/servers", "/servers/control", {"server": "srv-1", "action": "quiet"})
    await client.set_concurrency("mail", None, server="srv-1")  # the quiet's 0 lifted by hand
    await post_form(http, "/servers", "/servers/control", {"server": "srv-1", "action": "wake"})
    own = {lim.queue: lim.concurrency for lim in (await client.queue_controls()).limits}
    assert own == {"reports": 1}
