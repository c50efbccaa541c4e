"""A dependent stranded on a job that is gone: the leader's sweeper releases it, the job
runs, and kiln.jobs.stranded counts it (exported at 0 from the start). On every store."""

from __future__ import annotations

import kiln
import kilnotel
from kiln.stores import store_from_url
from kilnotel import names as n
from tests.otel.conftest import Running, Telemetry, fast_config, wait_until
from tests.stores.factories import delete_row_only


async def test_a_stranded_dependent_is_released_run_and_counted(
    store_url: str, telemetry: Telemetry
) -> None:
    app = kiln.App(store_url)

    @app.job("step", queue="etl")
    async def step(job: kiln.Job) -> None:
        return None

    store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    client = kiln.Client(store, app.kinds)
    gone = await client.enqueue("step", {"part": 1}, delay=3600)
    child = await client.enqueue("step", {"part": 2}, depends_on=[gone])
    delete_row_only(store_url, gone)  # pruned by a kiln that did not release dependents
    server = app.server({"etl": 1}, fast_config(prune_interval=0.2))
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    assert telemetry.value(n.JOBS_STRANDED.name, queue="etl") == 0
    running = Running(server)
    try:
        await running.started()

        async def completed() -> bool:
            row = await store.job_get(child)
            return row is not None and row.state is kiln.JobState.COMPLETED

        await wait_until(completed, 15, "the stranded dependent to be released and run")
        assert telemetry.value(n.JOBS_STRANDED.name, queue="etl") == 1
    finally:
        await running.stop()
        await store.close()


async def test_pending_jobs_of_an_undeclared_rate_key_are_exported(
    store_url: str, telemetry: Telemetry
) -> None:
    app = kiln.App(store_url)

    @app.job("step", queue="etl")
    async def step(job: kiln.Job) -> None:
        return None

    store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    server = app.server({"etl": 1}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    try:
        await running.started()
        assert telemetry.value(n.RATE_KEYS_UNDECLARED.name) == 0
        # a producer that does not import the handlers names a key nobody declares
        producer = kiln.Client(store)
        job_id = await producer.enqueue("step", {}, queue="etl", rate_key="stripe-typo")

        async def exported() -> bool:
            return telemetry.value(n.RATE_KEYS_UNDECLARED.name) == 1

        await wait_until(exported, 10, "the undeclared key to be exported")
        assert server.stats().rate_keys_undeclared == 1
        await store.rate_limit_declare("stripe-typo", kiln.RateLimit(rate=10))

        async def admitted_and_clear() -> bool:
            row = await store.job_get(job_id)
            return (row is not None and row.state is kiln.JobState.COMPLETED
                    and telemetry.value(n.RATE_KEYS_UNDECLARED.name) == 0)

        await wait_until(admitted_and_clear, 10, "the key declared, its job run")
    finally:
        await running.stop()
        await store.close()
