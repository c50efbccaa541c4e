"""Pool under queue controls: a pause hands back the jobs claimed ahead at once, claims
nothing more and lets running jobs finish; a lowered concurrency cancels nothing and
starts nothing new until the running jobs are under it; resuming claims again."""

from __future__ import annotations

import asyncio

from kiln._model._job import Outcome
from kiln._server._handle import Job
from tests.support.parts import pool_for_test
from tests.support.waits import wait_for
from tests.test_pool import CONCURRENCY, FakeStore


async def test_pause_and_lowered_concurrency() -> None:
    store = FakeStore(1000)
    gate = asyncio.Event()
    started: list[int] = []

    async def handler(job: Job) -> None:
        started.append(job.id)
        if len(started) > 40:  # quick at first (the pool claims ahead), then blocked
            await gate.wait()

    parts = pool_for_test(store, handler, concurrency=CONCURRENCY)
    pool = store.pool = parts.pool
    await parts.start()
    try:
        await wait_for(lambda: len(started) == 40 + CONCURRENCY and pool.waiting > 0, 5.0,
                       "the pool full and waiting", interval=0.005)
        pool.set_paused(True)
        assert pool.waiting == 0  # the jobs claimed ahead go back at once
        running = list(pool.running)
        assert len(running) == CONCURRENCY  # running jobs go on
        asked = len(store.asked)
        pool.set_concurrency(1)  # lowered below what runs: nothing is cancelled
        await asyncio.sleep(0.2)  # four poll intervals
        assert len(store.asked) == asked  # paused: no claim
        assert not any(t.done() for t in running)
        pool.set_paused(False)
        await asyncio.sleep(0.1)
        assert len(store.asked) == asked  # 4 running, limit 1: still no room
        gate.set()
        # claims again once under it
        await wait_for(lambda: len(started) > 40 + CONCURRENCY, 5.0,
                       "a claim once under the limit", interval=0.005)
        assert len(pool.running) <= 1
    finally:
        gate.set()
        await parts.stop()
    handed = [r for r in store.results if r.outcome is Outcome.HANDED_BACK]
    assert handed and not {r.job_id for r in handed} & set(started)  # none had started
