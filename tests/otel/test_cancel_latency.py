"""A running job cancelled from outside is recorded in kiln_cancel_latency_seconds (from
the cancel to the end of its handler), on every store."""

from __future__ import annotations

import asyncio

import kiln
import kilnotel
from kiln.stores import store_from_url
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, fast_config
from tests.support.waits import wait_for


async def test_a_cancelled_running_job_records_its_cancel_latency(
    store_url: str, telemetry: Telemetry
) -> None:
    app = kiln.App(store_url)
    started = asyncio.Event()

    @app.job("long", queue="reports")
    async def long(job: kiln.Job) -> None:
        started.set()
        await asyncio.sleep(30)

    store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    server = app.server({"reports": 1}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    try:
        await running.started()
        client = kiln.Client(store, app.kinds)
        job_id = await client.enqueue("long", {})
        await asyncio.wait_for(started.wait(), 10)
        await client.cancel(kiln.filter_of(ids=[job_id]), actor="test")

        async def recorded() -> bool:
            return any(p.count for p in telemetry.points(n.CANCEL_LATENCY.name))

        await wait_for(recorded, 10, "the cancel latency to be recorded")
        point = telemetry.histogram(n.CANCEL_LATENCY.name, queue="reports",
                                    kiln_job_kind="long")
        assert point.count == 1 and 0 <= point.sum < 5.0
        assert tuple(point.explicit_bounds) == n.CANCEL_BUCKETS
    finally:
        await running.stop()
        await store.close()
