"""kiln._aio._tasks.stop_task: a stop waits for a cancelled task, but not for ever."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from kiln._aio._tasks import stop_task


async def test_a_task_that_ends_at_its_cancel_is_waited_for() -> None:
    ended = asyncio.Event()

    async def body() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.set()

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    await stop_task(task, wait=5.0)
    assert ended.is_set() and task.cancelled()


async def test_a_second_cancel_interrupts_a_slow_cleanup() -> None:
    """As psycopg's: the first cancel starts a slow cancel of the query, the second
    cuts it short."""
    async def body() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(60)  # the slow cleanup
            raise

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    t0 = time.monotonic()
    await stop_task(task, wait=0.2)
    assert task.cancelled()
    assert time.monotonic() - t0 < 2.0


async def test_a_task_that_ignores_every_cancel_is_left_behind(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def body() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    task = asyncio.create_task(body(), name="stubborn")
    await asyncio.sleep(0)
    t0 = time.monotonic()
    await stop_task(task, wait=0.2)
    assert time.monotonic() - t0 < 2.0
    assert not task.done()
    assert "stubborn still runs" in caplog.text
    release.set()
    await task


async def test_a_task_that_failed_raises_its_error() -> None:
    async def body() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(body())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="boom"):
        await stop_task(task)


async def test_none_is_fine() -> None:
    await stop_task(None)
