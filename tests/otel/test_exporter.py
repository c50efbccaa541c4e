"""kiln exporter's numbers (kilnotel.QueueExporter), with no worker running, against the
database: jobs by state per queue, scheduled jobs due, oldest available age, paused
queues, live servers per queue, and the installation id on kiln_build_info.

Read through the Prometheus exposition, as a scrape (or KEDA through Prometheus) would.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import kiln
import kilnotel
from kiln._model._job import ServerInfo
from kilnotel import names as n
from tests.support.waits import wait_for

QUEUES = ("default", "long", "limited", "reports")  # reports: told, never used


def samples(registry: CollectorRegistry, family: str) -> dict[str, float]:
    """queue (or "" without one) -> value of every sample of ``family``."""
    out: dict[str, float] = {}
    for line in generate_latest(registry).decode().splitlines():
        match = re.match(rf"^{family}(?:\{{([^}}]*)\}})? (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
            out[labels.get("queue", "")] = float(match.group(2))
    return out


def build_info(registry: CollectorRegistry) -> list[dict[str, str]]:
    found = []
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("kiln_build_info{"):
            found.append(dict(re.findall(r'(\w+)="([^"]*)"', line)))
    return found


def server(server_id: str, queues: dict[str, int]) -> ServerInfo:
    return ServerInfo(id=server_id, host="test", pid=1, queues=queues, kinds=["ok"],
                      version="test", started_at=datetime.now(UTC))


async def test_the_exporter_reports_the_queues_as_the_database_holds_them(
    client: kiln.Client, store_url: str
) -> None:
    store = client._store
    # a server that went quiet, then one alive: only the live one serves its queues
    await store.server_register(server("srv-old", {"limited": 1}))

    async def old_is_stale() -> bool:
        ages = {s.id: s.heartbeat_age for s in await client.servers()}
        return (ages.get("srv-old") or 0) > 1.0

    await wait_for(old_is_stale, 15, "srv-old's heartbeat older than stale_after")
    await store.server_register(server("srv-live", {"default": 2, "long": 1}))
    for _ in range(3):
        await client.enqueue("ok", {})
    await client.enqueue("ok", {}, delay=0.2)  # falls due; no releaser runs
    await client.enqueue("ok", {}, delay=3600)  # scheduled, not due
    await client.enqueue("limited", {})  # pending: no admitter runs
    await client.enqueue("long", {})
    (claimed,) = await store.job_claim("default", ["ok"], 1, "srv-live")
    await client.pause_queue("long", actor="test")

    async def due() -> bool:
        return (await client.scheduled_due()).get("default") == 1

    await wait_for(due, 15, "the delayed job due by the database clock")

    provider, registry = kilnotel.prometheus_provider()
    exporter = kilnotel.QueueExporter(client, provider, queues=QUEUES, counts_ttl=1,
                                      stale_after=1.0)
    assert samples(registry, "kiln_jobs_available") == {}  # nothing before a read
    await store.server_heartbeat("srv-live")
    assert await exporter.refresh_once()

    known = set(QUEUES)
    for state, metric in n.JOBS_BY_STATE.items():
        shown = samples(registry, metric.prometheus_name)
        assert set(shown) == known, (state, shown)  # zero-filled for every known queue
        for queue in known:
            in_db = await client.count(kiln.filter_of(state=state, queue=queue))
            assert shown[queue] == in_db, (state, queue, shown[queue], in_db)
    assert samples(registry, "kiln_jobs_available")["default"] == 2
    assert samples(registry, "kiln_jobs_running")["default"] == 1 and claimed.queue == "default"
    assert samples(registry, "kiln_jobs_pending")["limited"] == 1
    assert samples(registry, "kiln_queue_scheduled_due") == {
        q: float((await client.scheduled_due()).get(q, 0)) for q in known}
    assert samples(registry, "kiln_queue_scheduled_due")["default"] == 1
    assert samples(registry, "kiln_queue_servers") == {
        "default": 1, "long": 1, "limited": 0, "reports": 0}
    assert samples(registry, "kiln_queue_paused") == {
        "default": 0, "long": 1, "limited": 0, "reports": 0}
    oldest = samples(registry, "kiln_queue_oldest_available_age_seconds")
    ages = await client.oldest_available()
    assert oldest["reports"] == 0 and oldest["long"] >= 0
    assert abs(oldest["default"] - ages["default"]) < 5
    (info,) = build_info(registry)
    assert info["kiln_installation"] == await client.installation()
    assert samples(registry, "kiln_counts_age_seconds")[""] < 5

    exporter.close()  # withdrawn: nothing left to scrape but the failure counter
    assert samples(registry, "kiln_jobs_available") == {}
    assert build_info(registry) == []
    provider.shutdown()


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_a_failing_read_is_counted_and_the_numbers_withdrawn(
    client: kiln.Client, store_url: str
) -> None:
    provider, registry = kilnotel.prometheus_provider()
    exporter = kilnotel.QueueExporter(client, provider, counts_ttl=0.1, counts_max_age=0.3)
    await client.enqueue("ok", {})
    assert await exporter.refresh_once()
    assert samples(registry, "kiln_jobs_available") == {"default": 1}

    async def broken() -> dict[str, int]:
        raise ConnectionError("database unreachable (test)")

    client._store.queue_scheduled_due = broken  # type: ignore[method-assign]
    assert not await exporter.refresh_once()
    assert samples(registry, "kiln_counts_refresh_failures_total") == {"": 1}

    async def withdrawn() -> bool:
        return samples(registry, "kiln_jobs_available") == {}

    await wait_for(withdrawn, 15, "the stale numbers withdrawn after counts_max_age")
    exporter.close()
    provider.shutdown()
