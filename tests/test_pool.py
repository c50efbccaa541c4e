"""Pool: claims up to its free slots, claims ahead only while its jobs are quick, never
holds more than (1 + AHEAD_MAX) x concurrency, and hands back the claimed jobs that
never started.

A fake store stands in for the database (the stores have their own suite): it hands
out rows and records what each claim asked for and what the pool held at the time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from kiln._model._job import JobResult, JobRow, Outcome
from kiln._server._claim_ahead import AHEAD_MAX, AHEAD_STALL, AHEAD_WAIT
from kiln._server._handle import Job
from kiln._server._pool import Pool
from kiln.stores._protocol import ApplyResult, Capabilities
from tests.support.parts import pool_for_test, row

CONCURRENCY = 4


class FakeStore:
    capabilities = Capabilities(listen_notify=False, claim_on_notify=False)

    def __init__(self, jobs: int) -> None:
        self.left = list(range(1, jobs + 1))
        self.asked: list[tuple[int, int]] = []  # (limit, jobs the pool held when asked)
        self.results: list[JobResult] = []
        self.pool: Pool | None = None

    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str
    ) -> list[JobRow]:
        assert self.pool is not None
        self.asked.append((limit, len(self.pool.running) + self.pool.waiting))
        await asyncio.sleep(0.001)  # a round trip, during which jobs go on running
        taken, self.left = self.left[:limit], self.left[limit:]
        return [row(i) for i in taken]

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult:
        self.results.extend(results)
        return ApplyResult(applied=len(results), released={},
                           applied_ids=frozenset(r.job_id for r in results))


async def drain(
    store: FakeStore, handler: Callable[[Job], Awaitable[Any]], until: Callable[[], bool],
    timeout: float = 10.0,
) -> Pool:
    parts = pool_for_test(store, handler, concurrency=CONCURRENCY)
    store.pool = parts.pool
    await parts.start()
    try:
        async with asyncio.timeout(timeout):
            while not until():
                await asyncio.sleep(0.005)
    finally:
        await parts.stop()
    return parts.pool


async def test_quick_jobs_are_claimed_ahead_up_to_a_bound() -> None:
    store = FakeStore(400)

    async def quick(job: Job) -> None:
        await asyncio.sleep(0)

    await drain(store, quick, lambda: len(store.results) == 400)
    assert all(limit + held <= (1 + AHEAD_MAX) * CONCURRENCY for limit, held in store.asked)
    assert max(limit for limit, _held in store.asked) > CONCURRENCY  # claimed ahead
    assert all(r.outcome is Outcome.COMPLETED for r in store.results)
    assert sorted(r.job_id for r in store.results) == list(range(1, 401))


async def test_slow_jobs_are_claimed_only_for_free_slots() -> None:
    store = FakeStore(3 * CONCURRENCY)

    async def slow(job: Job) -> None:
        await asyncio.sleep(AHEAD_WAIT * CONCURRENCY * 1.5)  # too long to claim ahead

    await drain(store, slow, lambda: len(store.results) == 3 * CONCURRENCY)
    assert all(limit + held <= CONCURRENCY for limit, held in store.asked)


async def test_stop_hands_back_claimed_jobs_that_never_started() -> None:
    store = FakeStore(1000)
    gate = asyncio.Event()
    started: list[int] = []

    async def handler(job: Job) -> None:
        started.append(job.id)
        if len(started) > 40:  # quick at first (the pool learns to claim ahead), then stuck
            await gate.wait()

    def stuck() -> bool:  # every slot taken by a blocked job, and more jobs claimed
        pool = store.pool
        return len(started) == 40 + CONCURRENCY and pool is not None and pool.waiting > 0

    pool = await drain(store, handler, stuck)
    running = list(pool.running)
    assert pool.waiting == 0 and len(running) == CONCURRENCY
    handed = [r for r in store.results if r.outcome is Outcome.HANDED_BACK]
    assert handed, "the claimed jobs waiting for a slot were handed back"
    assert not {r.job_id for r in handed} & set(started)  # none of them had started
    assert all(r.attempt == 1 for r in handed)  # hand-back keeps the attempt
    gate.set()
    await asyncio.wait(running, timeout=5)
    assert not pool.running and pool.waiting == 0  # stopped: no claimed job started since
    assert len(started) == 40 + CONCURRENCY


async def test_jobs_claimed_ahead_are_handed_back_when_long_jobs_take_every_slot() -> None:
    store = FakeStore(1000)
    gate = asyncio.Event()
    started: list[int] = []

    async def handler(job: Job) -> None:
        started.append(job.id)
        if len(started) > 40:  # quick at first, then every slot is taken by a long job
            await gate.wait()

    def handed_back() -> bool:
        return any(r.outcome is Outcome.HANDED_BACK for r in store.results)

    began = asyncio.get_running_loop().time()
    pool_task = asyncio.ensure_future(drain(store, handler, handed_back))
    while store.pool is None or not (len(started) == 40 + CONCURRENCY and store.pool.waiting):
        await asyncio.sleep(0.005)
        assert asyncio.get_running_loop().time() - began < 5, "never claimed ahead"
    stuck_at = asyncio.get_running_loop().time()
    asked = len(store.asked)
    pool = await pool_task  # returns once the waiting jobs are handed back (then stops)
    assert asyncio.get_running_loop().time() - stuck_at >= AHEAD_STALL * 0.9
    handed = [r for r in store.results if r.outcome is Outcome.HANDED_BACK]
    assert not {r.job_id for r in handed} & set(started) and all(r.attempt == 1 for r in handed)
    assert all(limit + held <= CONCURRENCY for limit, held in store.asked[asked:])
    gate.set()
    await asyncio.wait(list(pool.running), timeout=5)
