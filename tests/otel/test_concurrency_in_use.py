"""The kiln_concurrency_in_use gauge: running limited jobs by key group, never by key."""

from __future__ import annotations

import asyncio

import kiln
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, fast_config


async def test_running_limited_jobs_by_key_group(store_url: str, telemetry: Telemetry) -> None:
    app = kiln.App(store_url)
    release = asyncio.Event()
    started = asyncio.Event()

    @app.job("tenant.sync", queue="sync", concurrency=kiln.Concurrency(max=2, key="args.t"))
    async def sync(job: kiln.Job) -> None:
        started.set()
        await release.wait()

    app.queue_concurrency("exports", kiln.Concurrency(max=1))
    app.migrate()
    server = app.server({"sync": 10, "exports": 1}, fast_config())
    observer = kilnotel.observe(server, telemetry.meter_provider, counts_ttl=60)
    running = Running(server)
    await running.started()
    try:
        client = kiln.Client(server._store, app.kinds)  # the server's store: no other to close
        for tenant in ("a", "a", "a", "b", "c"):
            await client.enqueue("tenant.sync", {"t": tenant})
        state = kiln.JobFilter(states=(kiln.JobState.RUNNING,))
        async with asyncio.timeout(10):
            while await client.count(state) < 4:  # a: 2 of 3, b, c
                await asyncio.sleep(0.02)
        await observer.refresh_counts()
        points = {p.attributes[n.KEY_GROUP]: p.value
                  for p in telemetry.points(n.CONCURRENCY_IN_USE.name)}
        assert points == {"kind:tenant.sync": 4, "queue:exports": 0}  # one series per group
    finally:
        release.set()
        await running.stop()
        app.close()
