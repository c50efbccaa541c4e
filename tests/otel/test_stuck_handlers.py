"""A plain def handler that outlives its timeout shows up as a stuck handler: the
kiln.jobs.stuck counter, the kiln.server.handlers.stuck gauge, and kiln.server.healthy
at 0 while stuck handlers hold every slot of a queue; all back to normal once it
returns. On every store."""

from __future__ import annotations

import threading

import kiln
import kilnotel
from kiln.stores import store_from_url
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, fast_config
from tests.support.waits import wait_for


async def test_a_hung_sync_handler_is_counted_exported_and_unhealthy(
    store_url: str, telemetry: Telemetry
) -> None:
    app = kiln.App(store_url)
    release = threading.Event()

    @app.job("hang", queue="reports", timeout=0.2, max_attempts=1)
    def hang(job: kiln.Job) -> None:
        release.wait(20)

    store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    server = app.server({"reports": 1}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    assert telemetry.value(n.JOBS_STUCK.name, queue="reports", kiln_job_kind="hang") == 0
    running = Running(server)
    try:
        await running.started()
        await kiln.Client(store, app.kinds).enqueue("hang", {})

        async def stuck() -> bool:
            return telemetry.value(n.SERVER_HANDLERS_STUCK.name, queue="reports") == 1

        await wait_for(stuck, 10, "the stuck handler to be exported")
        assert telemetry.value(n.JOBS_STUCK.name, queue="reports", kiln_job_kind="hang") == 1
        assert telemetry.value(n.SERVER_HEALTHY.name) == 0
        release.set()

        async def freed() -> bool:
            return (telemetry.value(n.SERVER_HANDLERS_STUCK.name, queue="reports") == 0
                    and telemetry.value(n.SERVER_HEALTHY.name) == 1)

        await wait_for(freed, 10, "the handler to return and health to come back")
    finally:
        release.set()
        await running.stop()
        await store.close()
