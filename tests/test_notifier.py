"""A Bus publish that fails is seen: a StoreFailed event (``bus_publish``), which
kilnotel counts in kiln.db.errors, and a warning at most once per WARN_INTERVAL.

It used to be dropped (``add_done_callback(lambda t: t.exception())``): with Redis
down, released jobs waited for other servers' poll_interval and nothing said why.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from prometheus_client import generate_latest

import kiln
import kiln.events
import kilnotel
from kiln._events import EventHub
from kiln._server._notifier import WARN_INTERVAL, Notifier
from kiln.stores import store_from_url
from tests.support.config import fast_config
from tests.support.waits import wait_for

FAST = fast_config(leader_ttl=None)


class PublishDown(kiln.InProcessBus):
    """Delivers what producers send (``publish_sync``), fails what servers publish."""

    name = "publish-down"

    def __init__(self) -> None:
        super().__init__()
        self.attempts = 0

    async def publish(self, payload: str) -> None:
        self.attempts += 1
        raise OSError("bus unreachable")


def _bus_failures(events: list[kiln.events.Event]) -> list[kiln.events.StoreFailed]:
    return [e for e in events
            if isinstance(e, kiln.events.StoreFailed) and e.operation == "bus_publish"]


async def test_a_failed_publish_is_an_event_and_a_metric(tmp_path: Path) -> None:
    bus = PublishDown()
    app = kiln.App(f"sqlite:///{tmp_path / 'k.db'}", bus=bus)
    app.register("noop", lambda job: None)
    await app.amigrate()
    server = app.server({"default": 1}, FAST)
    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, provider, traces=False)
    seen: list[kiln.events.Event] = []
    server.events.subscribe(seen.append, types=(kiln.events.StoreFailed,))
    task = asyncio.create_task(server.run())
    try:
        await wait_for(lambda: server.state == "running", 10.0, "the server to run")
        # due later: the releaser makes it available, and publishes that to the fleet
        job_id = await app.aenqueue("noop", {}, delay=0.3)
        await wait_for(lambda: bool(_bus_failures(seen)), 10.0, "the failed publish to be reported")
        failure = _bus_failures(seen)[0]
        assert isinstance(failure.error, OSError) and bus.attempts >= 1
        assert server.stats().store_errors >= 1
        text = generate_latest(registry).decode()
        assert any(line.startswith("kiln_db_errors_total{")
                   and 'operation="bus_publish"' in line and not line.endswith(" 0.0")
                   for line in text.splitlines()), text
        # this server's own pool was woken all the same
        await wait_for(lambda: server.stats().completed == 1, 10.0, f"job {job_id} to run")
    finally:
        server.stop()
        await asyncio.wait_for(task, 30)
        provider.shutdown()
        await app.aclose()


async def test_a_bus_that_stays_down_is_warned_about_once_per_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    hub, seen = EventHub(), list[kiln.events.Event]()
    hub.subscribe(seen.append, types=(kiln.events.StoreFailed,))
    store = store_from_url(f"sqlite:///{tmp_path / 'k.db'}")  # only its capabilities are read
    notifier = Notifier(store=store, events=hub, bus=PublishDown(), pools={},
                        clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="kiln.notifier")

    async def fail(times: int) -> None:
        before = len(seen)
        for _ in range(times):
            notifier.wake({"q": 1}, "scheduled")
        await wait_for(lambda: len(seen) == before + times, 10.0, f"{times} failures reported")

    await fail(3)
    assert len(_bus_failures(seen)) == 3
    assert len(caplog.records) == 1  # the first failure; the next two within the interval
    now[0] += WARN_INTERVAL - 1
    await fail(1)
    assert len(caplog.records) == 1
    now[0] += 1
    await fail(1)
    assert len(caplog.records) == 2
    assert "publish-down" in caplog.records[1].getMessage()
    assert "(4 failed since the last warning)" in caplog.records[1].getMessage()
