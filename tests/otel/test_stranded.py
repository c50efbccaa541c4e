"""Jobs that would wait for ever, exported: a dependent stranded on a job that is gone
(the leader's sweeper releases it, the job runs, and kiln.jobs.stranded counts it,
exported at 0 from the start); pending jobs of an undeclared rate key; available jobs
no live server handles (kiln.jobs.unhandled). On every store."""

from __future__ import annotations

import kiln
import kilnotel
from kiln.stores import store_from_url
from kilnotel import names as n
from tests.stores.factories import delete_row_only
from tests.support.otel import Running, Telemetry, fast_config
from tests.support.waits import wait_for


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

        await wait_for(completed, 15, "the stranded dependent to be released and run")
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

        await wait_for(exported, 10, "the undeclared key to be exported")
        assert server.stats().rate_keys_undeclared == 1
        await store.rate_limit_declare("stripe-typo", kiln.RateLimit(rate=10))

        async def admitted_and_clear() -> bool:
            row = await store.job_get(job_id)
            return (row is not None and row.state is kiln.JobState.COMPLETED
                    and telemetry.value(n.RATE_KEYS_UNDECLARED.name) == 0)

        await wait_for(admitted_and_clear, 10, "the key declared, its job run")
    finally:
        await running.stop()
        await store.close()


async def test_jobs_no_live_server_handles_are_exported_until_one_does(
    store_url: str, telemetry: Telemetry
) -> None:
    """A producer enqueues a kind no server declares yet: kiln.jobs.unhandled counts it
    by queue and kind; once a server of the kind starts, its jobs follow its declaration
    (another queue) and run, and the gauge reads 0 (issue 39 item 9)."""
    app = kiln.App(store_url)

    @app.job("step", queue="etl")
    async def step(job: kiln.Job) -> None:
        return None

    later = kiln.App(store_url)  # the service of the new kind, not started yet

    @later.job("t.new", queue="fresh")
    async def new(job: kiln.Job) -> None:
        return None

    store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    server = app.server({"etl": 1}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider,
                     counts_ttl=0.2, counts_from="all")
    running = Running(server)
    try:
        await running.started()
        job_id = await kiln.Client(store).enqueue("t.new", {})  # no declaration anywhere

        async def exported() -> bool:
            return telemetry.value(n.JOBS_UNHANDLED.name, queue="default",
                                   kiln_job_kind="t.new") == 1

        await wait_for(exported, 10, "the unhandled job to be exported")
        other = Running(later.server({"fresh": 1}, fast_config()))
        await other.started()
        try:
            async def adopted_run_and_clear() -> bool:
                row = await store.job_get(job_id)
                return (row is not None and row.state is kiln.JobState.COMPLETED
                        and row.queue == "fresh"
                        and telemetry.value(n.JOBS_UNHANDLED.name, queue="default",
                                            kiln_job_kind="t.new") == 0)

            await wait_for(adopted_run_and_clear, 10, "the job adopted, run, and cleared")
        finally:
            await other.stop()
    finally:
        await running.stop()
        await store.close()
        await later.aclose()
