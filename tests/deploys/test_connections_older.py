"""kiln_servers.connections (migration 18) in a fleet where a kiln older than it beats
beside a newer one, on SQLite, PostgreSQL and MariaDB: the older never writes the
column, so every view shows it unknown ("-" in ``kiln servers``, "—" on the dashboard,
null in /api/servers and ``--json``) and never 0, while the newer's shows the count
its heartbeat said; and no process reports a ``kiln.server.connections`` gauge for the
older one (an observed server reports its own process's, kiln exporter none).

The older kiln is simulated as it writes: its heartbeat is the store's without a
connection count (an older kiln's UPDATE sets heartbeat_at only), the same way the
deploy sequences write a newer kiln's publications through the store.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest

import kiln
import kiln.events
import kilnotel
from kiln.stores import Store
from kiln.web import create_app
from kilnotel import names as n
from tests.integration.inprocess import Running, config
from tests.support.cli import run_cli
from tests.support.otel import Telemetry
from tests.support.waits import wait_for
from tests.support.web import BASE_URL

pytestmark = pytest.mark.deploy_sequence

GAUGE = n.SERVER_CONNECTIONS.name


def as_older_kiln(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's heartbeat as a kiln before migration 18 wrote it: no connections."""
    beat = store.server_heartbeat

    async def older(server_id: str, connections: int | None = None) -> bool:
        return await beat(server_id)

    monkeypatch.setattr(store, "server_heartbeat", older)


def app_of(url: str) -> kiln.App:
    app = kiln.App(url)
    app.register("t.k", lambda job: None, queue="q")
    return app


def cells(page: str, server_id: str) -> list[str]:
    """The text of each cell of the server's row on /servers."""
    row = page.split(f'data-server="{server_id}"', 1)[1].split("</tr>", 1)[0]
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>",
                                                                  row, re.S)]


async def test_an_older_kiln_beating_beside_a_newer_shows_its_connections_unknown(
    store_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    newer_app, older_app = app_of(store_url), app_of(store_url)
    await newer_app.amigrate()
    older_store = older_app.new_store()
    as_older_kiln(older_store, monkeypatch)
    newer = Running(newer_app.server({"q": 2}, config()))
    older = Running(kiln.Server(older_store, older_app.kinds, {"q": 2}, config()))
    seen, exported = Telemetry(), Telemetry()
    kilnotel.observe(newer.server, seen.meter_provider, traces=False)
    try:
        await newer.started()
        await older.started()
        client = newer_app.client()

        async def both_beat() -> list[kiln.ServerInfo] | None:
            beats = [len([e for e in r.of(kiln.events.Heartbeat) if e.ok])
                     for r in (newer, older)]
            listed = await client.servers()
            mine = [s for s in listed if s.id == newer.server.id]
            return listed if min(beats) >= 2 and mine and mine[0].connections else None

        listed = {s.id: s for s in await wait_for(both_beat, 15, "both servers to beat")}
        said = listed[newer.server.id].connections
        assert isinstance(said, int) and said >= 1
        assert listed[older.server.id].connections is None
        ids = {"newer": newer.server.id, "older": older.server.id}

        text = await asyncio.to_thread(run_cli, "--database-url", store_url, "servers")
        as_json = await asyncio.to_thread(run_cli, "--database-url", store_url, "servers",
                                          "--json")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(client)),
                                     base_url=BASE_URL) as http:
            page = (await http.get("/servers")).text
            api = (await http.get("/api/servers")).json()
        exporter = kilnotel.QueueExporter(client, exported.meter_provider)
        await exporter.refresh()
        before = newer.server.connections()
        gauges = {"observed": seen.points(GAUGE), "exporter": exported.points(GAUGE)}
        held = {before, newer.server.connections()}  # what the gauge read, from memory
    finally:
        for running in (newer, older):
            await running.stop()
        for app in (newer_app, older_app):
            await app.aclose()
        seen.shutdown()
        exported.shutdown()
    assert text.returncode == 0 and as_json.returncode == 0, text.stderr + as_json.stderr
    header, *lines = text.stdout.strip().splitlines()
    at = header.index("CONNS")  # a padded table: the column starts where its heading does
    table = {line.split()[0]: line[at:].split()[0] for line in lines}
    # the newer's count moves as its process opens connections: a number, said by a beat
    assert table[ids["older"]] == "-" and int(table[ids["newer"]]) >= 1, text.stdout
    for listing in (json.loads(as_json.stdout)["servers"], api["servers"]):
        shown: dict[str, Any] = {s["id"]: s["connections"] for s in listing}
        assert shown[ids["older"]] is None and isinstance(shown[ids["newer"]], int) \
            and shown[ids["newer"]] >= 1, listing
    heading = re.findall(r"<th[^>]*>(.*?)</th>", page.split("</thead>", 1)[0])
    column = heading.index("connections")
    assert cells(page, ids["older"])[column] == "—"
    assert int(cells(page, ids["newer"])[column]) >= 1
    # the gauge: the observed (newer) server's own process only, never a 0 for the older
    [point] = gauges["observed"]
    assert point.value in held and not point.attributes, gauges
    assert gauges["exporter"] == []
