"""A server on a RedisBus whose connection drops falls back to the 100 ms release check
at once, reports the change, and relies on notifications again once Redis is back.

poll_interval is 5 s here, so a delayed job that starts within a few hundred ms was
released by the fallback check (down) or by the bus's wake-up (up), not by polling.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import kiln
import kiln.events
from tests.flow.proxy import Proxy
from tests.support.flow import REDIS_HOST, REDIS_PORT, redis_url
from tests.support.waits import wait_for


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    p = Proxy(REDIS_HOST, REDIS_PORT)
    await p.start()
    yield p
    await p.cut()


async def test_bus_drop_falls_back_to_the_release_check_and_back(
    proxy: Proxy, tmp_path: Path
) -> None:
    url, channel = f"sqlite:///{tmp_path / 'kiln.db'}", f"kiln-{uuid.uuid4().hex[:8]}"
    worker_bus = kiln.RedisBus(redis_url(proxy.port), channel, max_reconnect_delay=0.2)
    worker_app = kiln.App(url, bus=worker_bus)
    started: dict[int, float] = {}

    @worker_app.job("tick")
    async def tick(job: kiln.Job) -> None:
        started[job.id] = time.time()

    await worker_app.amigrate()
    client_bus = kiln.RedisBus(redis_url(), channel)  # straight to Redis: never cut
    client = kiln.App(url, bus=client_bus).client()
    changes: list[bool] = []
    events = kiln.events.EventHub()
    events.subscribe(lambda e: changes.append(e.up) if isinstance(e, kiln.events.NotifierChanged)
                     else None)
    server = worker_app.server({"default": 4}, kiln.ServerConfig(poll_interval=5.0),
                               events=events)
    running = asyncio.create_task(server.run())

    async def lag_of_delayed_job() -> float:
        job_id = await client.enqueue("tick", {}, delay=0.3)
        await wait_for(lambda: job_id in started, 3.0, "the delayed job to start")
        row = await client.get(job_id)
        assert row is not None
        return started[job_id] - row.run_at.timestamp()

    try:
        await wait_for(lambda: server.stats().state == "running", 10, "the server to run")
        assert server.stats().notifications is True and changes == [True]
        await asyncio.sleep(0.5)  # the releaser is now asleep for up to poll_interval

        await proxy.cut()
        await wait_for(lambda: changes[-1] is False, 5, "NotifierChanged(up=False)")
        assert server.stats().notifications is False
        down = [await lag_of_delayed_job() for _ in range(3)]
        assert max(down) < 0.2, down  # the 100 ms check, not the 5 s poll

        await proxy.restore()
        await wait_for(lambda: changes[-1] is True, 5, "NotifierChanged(up=True)")
        assert server.stats().notifications is True
        await asyncio.sleep(0.5)
        up = [await lag_of_delayed_job() for _ in range(3)]
        assert max(up) < 0.1, up  # armed by the bus's scheduled: message
        assert changes == [True, False, True]
    finally:
        server.stop()
        await running
        await client._store.close()
        await client_bus.close()
        await worker_bus.close()
