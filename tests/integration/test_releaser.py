"""Retries and snoozes are released on time even when a later delayed job is known."""

from __future__ import annotations

import asyncio
import time

import kiln
import kiln.events
from tests.support.config import fast_config


async def test_retry_is_not_held_back_by_a_later_delayed_job(store_url: str) -> None:
    app = kiln.App(store_url, bus=kiln.InProcessBus())

    @app.job("later")
    async def later(job: kiln.Job) -> None:
        return None

    @app.job("failing", max_attempts=3, backoff=kiln.Constant(0.5))
    async def failing(job: kiln.Job) -> None:
        raise RuntimeError("no")

    await app.amigrate()
    await app.aenqueue("later", {}, delay=30)
    failing_id = await app.aenqueue("failing", {})
    config = fast_config(poll_interval=5, shutdown_timeout=None)
    server = app.server({"default": 2}, config)
    task = asyncio.create_task(server.run())
    began = time.monotonic()
    store = app.client()._store
    try:
        while True:
            job = await store.job_get(failing_id)
            assert job is not None
            if job.state is kiln.JobState.FAILED:
                break
            assert time.monotonic() - began < 6, f"still {job.state} after {job.attempt} attempts"
            await asyncio.sleep(0.05)
        # two waits of 0.5 s, released within the notified releaser's timer
        assert time.monotonic() - began < 3.0
    finally:
        server.stop()
        await task
        await app.aclose()


def test_an_object_with_an_async_call_is_an_async_handler() -> None:
    from kiln._model._kinds import make_kind

    class AsyncHandler:
        async def __call__(self, job: kiln.Job) -> None:
            return None

    class SyncHandler:
        def __call__(self, job: kiln.Job) -> None:
            return None

    assert make_kind("a", AsyncHandler()).is_async
    assert not make_kind("b", SyncHandler()).is_async


async def test_each_release_is_said_once_with_its_reason(store_url: str) -> None:
    """A scheduled job's release is one JobsReleased "scheduled", a chain's next step
    one "dependencies"; the server's wake-up says nothing twice."""
    from tests.integration.inprocess import Running, all_completed, config
    from tests.support.waits import wait_for

    app = kiln.App(store_url, bus=kiln.InProcessBus())

    @app.job("later", queue="later")
    async def later(job: kiln.Job) -> None:
        return None

    @app.job("step", queue="steps")
    async def step(job: kiln.Job) -> None:
        return None

    await app.amigrate()
    client = app.client()
    ids = [await client.enqueue("later", {}, delay=0.3),
           *await client.enqueue_chain([("step", {}), ("step", {})])]
    running = await Running(app.server({"later": 1, "steps": 1}, config())).started()
    try:
        await wait_for(lambda: all_completed(client.get, ids), 10, "the three jobs to complete")
    finally:
        await running.stop()
        await app.aclose()
    said = sorted((e.queue, e.reason, e.count) for e in running.of(kiln.events.JobsReleased))
    assert said == [("later", "scheduled", 1), ("steps", "dependencies", 1)]
