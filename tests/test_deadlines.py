"""Job timeouts: one timer for every running job (kiln._server._deadlines), turned into a
timed-out attempt by the executor; the task is left as asyncio.timeout leaves it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kiln._events import EventHub
from kiln._model._job import JobRow, Outcome
from kiln._model._kinds import make_kind
from kiln._server._deadlines import Deadlines
from kiln._server._executor import Executor
from kiln._server._handle import Job
from kiln._server._identity import Identity
from kiln._server._threads import ThreadPool
from tests.support.config import fast_config
from tests.support.parts import row


async def test_a_shorter_deadline_added_later_still_fires_on_time() -> None:
    deadlines = Deadlines()
    long = asyncio.ensure_future(asyncio.sleep(10))
    short = asyncio.ensure_future(asyncio.sleep(10))
    deadlines.add(long, 5.0)
    began = time.monotonic()
    deadlines.add(short, 0.05)
    await asyncio.wait([short], timeout=2)
    assert short.cancelled() and 0.04 <= time.monotonic() - began < 1.0
    assert deadlines.discard(short) is True
    assert not long.done() and deadlines.discard(long) is False
    assert len(deadlines) == 0
    long.cancel()
    deadlines.close()


async def _run(handler: Any, timeout: float | None = 0.05) -> tuple[Any, asyncio.Task[Any]]:
    config = fast_config(shutdown_timeout=None)
    threads = ThreadPool(2)

    async def no_params(r: JobRow, name: str, value: Any) -> bool:
        return True

    identity = Identity.named("s1")
    executor = Executor(kinds={"k": make_kind("k", handler, queue="q", timeout=timeout)},
                        config=config, events=EventHub(), threads=threads, identity=identity,
                        write_param=no_params, middleware=[])
    task = asyncio.ensure_future(executor.run(row(1)))
    try:
        return await task, task
    finally:
        threads.shutdown()


async def test_a_job_past_its_timeout_fails_its_attempt() -> None:
    async def sleepy(job: Job) -> None:
        await asyncio.sleep(5)

    began = time.monotonic()
    result, task = await _run(sleepy)
    assert time.monotonic() - began < 1.0
    assert result.outcome is Outcome.RETRY
    assert result.error is not None and "timed out after 0.05s" in result.error.error
    assert task.cancelling() == 0  # the deadline's cancel was taken back


async def test_a_handler_own_timeout_is_an_ordinary_failure() -> None:
    async def own(job: Job) -> None:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)

    result, _task = await _run(own, timeout=30)
    assert result.outcome is Outcome.RETRY
    assert result.error is not None and result.error.error.startswith("TimeoutError")
    assert "timed out after" not in result.error.error


async def test_a_handler_that_swallows_the_timeout_keeps_its_outcome() -> None:
    async def stubborn(job: Job) -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            return "done anyway"
        return "slept"

    result, task = await _run(stubborn)
    assert result.outcome is Outcome.COMPLETED and task.cancelling() == 0


def test_a_sync_handler_past_its_timeout_is_told_to_stop() -> None:
    seen: list[bool] = []

    def polling(job: Job) -> None:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and not job.cancelled.is_set():
            time.sleep(0.005)
        seen.append(job.cancelled.is_set())

    result, _task = asyncio.run(_run(polling))
    time.sleep(0.1)
    assert result.outcome is Outcome.RETRY and seen == [True]
