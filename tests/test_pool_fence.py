"""After a fence a pool never runs more live handlers than its concurrency.

A fenced server cancels its jobs, waits kill_grace and forgets them; a handler that
ignored the cancellation (an async one that swallows it, a plain def one, which
cannot be interrupted) still runs. Once the server rejoined, its pool claimed a full
set of new jobs beside them (issue 22, "after a fence a pool can run more than its
concurrency"). Those handlers now linger: each keeps its slot until it ends.

The fake store of tests/test_pool.py stands in for the database; the fence is the
server's sequence (kiln._server._stopper, Stopper.fence): grace, cancel, wait
kill_grace, abandon.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from kiln._events import EventHub, HandlerStuck
from kiln._server._handle import Job
from tests.support.parts import PoolParts, pool_for_test
from tests.test_pool import FakeStore

CONCURRENCY = 2
KILL_GRACE = 0.2


class Live:
    """How many handlers run at once, and the most there ever were."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.started = 0
        self._lock = threading.Lock()

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.started += 1
            self.most = max(self.most, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1


async def _fenced_pool(
    handler: Callable[[Job], Any], live: Live
) -> tuple[PoolParts, list[HandlerStuck]]:
    """A pool whose first CONCURRENCY jobs run ``handler``, fenced while they run."""
    store = FakeStore(40)
    stuck: list[HandlerStuck] = []
    events = EventHub()
    events.subscribe(lambda e: stuck.append(e) if isinstance(e, HandlerStuck) else None)
    parts = pool_for_test(store, handler, concurrency=CONCURRENCY, kill_grace=KILL_GRACE,
                          threads=2 * CONCURRENCY, events=events)
    pool = store.pool = parts.pool
    await parts.start()
    async with asyncio.timeout(5):
        while live.now < CONCURRENCY:
            await asyncio.sleep(0.005)
    loop = asyncio.get_running_loop()
    parts.executor.sync.grace_until = loop.time() + KILL_GRACE  # Stopper.fence, step by step
    tasks = list(pool.running)
    for task in tasks:
        task.cancel(msg="kiln: fenced (test)")
    await asyncio.wait(tasks, timeout=KILL_GRACE + 0.1)
    pool.abandon()
    parts.executor.sync.grace_until = None
    pool.wake()  # rejoined: the pool claims again
    return parts, stuck


async def _check_slots_kept(
    handler: Callable[[Job], Any], live: Live, release: Callable[[], None], thread: bool
) -> None:
    """Fence while the first jobs ignore it: nothing new starts until they end."""
    parts, stuck = await _fenced_pool(handler, live)
    pool = parts.pool
    try:
        await asyncio.sleep(0.3)
        assert live.started == CONCURRENCY, "claimed new jobs beside the lingering ones"
        assert len(pool.lingering) == CONCURRENCY
        assert [(e.reason, e.thread) for e in stuck] == [("fenced", thread)] * CONCURRENCY
        release()
        async with asyncio.timeout(5):
            while live.started < 10:
                await asyncio.sleep(0.005)
        assert len(pool.lingering) == 0
    finally:
        release()
        await parts.stop()
    assert live.most <= CONCURRENCY, live.most


async def test_an_async_handler_that_ignores_the_fence_keeps_its_slot() -> None:
    live, release = Live(), asyncio.Event()

    async def handler(job: Job) -> None:
        live.enter()
        try:
            if job.id <= CONCURRENCY:  # the jobs running at the fence ignore it
                while not release.is_set():
                    try:
                        await release.wait()
                    except asyncio.CancelledError:
                        continue
            else:
                await asyncio.sleep(0.01)
        finally:
            live.leave()

    await _check_slots_kept(handler, live, release.set, thread=False)


async def test_a_sync_handler_stuck_at_the_fence_keeps_its_slot() -> None:
    live, release = Live(), threading.Event()

    def handler(job: Job) -> None:
        live.enter()
        try:
            if job.id <= CONCURRENCY:
                release.wait(10)  # cannot be interrupted
        finally:
            live.leave()

    await _check_slots_kept(handler, live, release.set, thread=True)
