"""Pool and ClaimWatch: an idle pool on a store that claims on notifications.

A fake store stands in for the database (tests/stores/test_store_claim_watch.py holds
the real watch to its contract): its job_claim finds nothing, and the test decides
when the armed watch claims, what it hands over and how its commit ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import pytest

from kiln._errors import StoreError, UnreachableError
from kiln._model._job import JobResult, JobRow, Outcome
from kiln._server._handle import Job
from kiln.stores._protocol import ApplyResult, Capabilities, ClaimCallback, ClaimRun
from tests.support.parts import pool_for_test, row
from tests.support.waits import wait_for

CONCURRENCY = 4


class FakeWatch:
    def __init__(self, limit: int, on_claimed: ClaimCallback) -> None:
        self.limit = limit
        self.on_claimed = on_claimed
        self.active = True
        self.more = False
        self.closed = False
        self.runs: list[ClaimRun] = []
        self.error: StoreError | None = None
        self.committed = asyncio.Event()  # the claim's commit, confirmed
        self.committed.set()

    def claim(self, rows: list[JobRow], error: StoreError | None = None) -> None:
        """What the store does on a notification: rows before their commit."""
        assert self.active and not self.closed
        self.active = False
        self.on_claimed(rows)
        self.runs.append(ClaimRun(claimed=len(rows), duration=0.001))
        self.error = error

    @property
    def unsettled(self) -> bool:
        return not self.committed.is_set()

    async def wait_settled(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.committed.wait(), timeout)
        return self.committed.is_set()

    async def close(self, timeout: float = 5.0) -> list[ClaimRun]:
        if not await self.wait_settled(timeout):
            self.closed, self.active = True, False
            return self.runs
        self.closed, self.active = True, False
        if self.error is not None:
            raise self.error
        return self.runs


class WatchStore:
    capabilities = Capabilities(listen_notify=True, claim_on_notify=True)

    def __init__(self) -> None:
        self.claims = 0  # the pool's own claims
        self.claimable: list[JobRow] = []  # what the pool's own next claim finds
        self.watches: list[FakeWatch] = []
        self.results: list[JobResult] = []

    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str
    ) -> list[JobRow]:
        self.claims += 1
        rows, self.claimable = self.claimable, []
        return rows

    def job_claim_watch(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        on_claimed: ClaimCallback,
    ) -> FakeWatch:
        watch = FakeWatch(limit, on_claimed)
        self.watches.append(watch)
        return watch

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult:
        self.results.extend(results)
        return ApplyResult(applied=len(results), released={},
                           applied_ids=frozenset(r.job_id for r in results))

    async def armed(self, count: int) -> FakeWatch:
        """The count-th watch, once the pool armed it."""
        while len(self.watches) < count:
            await asyncio.sleep(0.001)
        return self.watches[count - 1]


class Running:
    def __init__(self, store: WatchStore) -> None:
        self.store = store
        self.started: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.parts = pool_for_test(store, self.handler, concurrency=CONCURRENCY,
                                   poll_interval=30.0)
        self.pool = self.parts.pool

    async def handler(self, job: Job) -> None:
        self.started.append(job.id)
        await self.gate.wait()


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    """A pool with a long poll_interval, so that only the test and the watch act."""
    run = Running(WatchStore())
    await run.parts.start()
    try:
        yield run
    finally:
        run.gate.set()
        await run.parts.stop(settle=5)


async def test_an_idle_pool_runs_what_its_watch_claims_and_arms_again(running: Running) -> None:
    store = running.store
    first = await store.armed(1)
    assert store.claims == 1 and first.limit == CONCURRENCY
    first.claim([row(1)])
    second = await store.armed(2)
    await wait_for(lambda: len(store.results) == 1, 5.0, "len(store.results) == 1", interval=0.001)
    assert running.started == [1] and store.results[0].outcome is Outcome.COMPLETED
    assert store.claims == 1  # it took fewer than its room: no claim of the pool's own
    assert first.closed and second.active
    second.claim([row(2)])
    await store.armed(3)
    await wait_for(lambda: running.started == [1, 2], 5.0, "jobs 1 and 2 started", interval=0.001)
    assert store.claims == 1


async def test_a_notification_wakes_the_pool_only_when_no_watch_claims_on_it(
    running: Running
) -> None:
    store, pool = running.store, running.pool
    watch = await store.armed(1)
    pool.notified()  # the store claims on this one for the pool
    await asyncio.sleep(0.02)
    assert store.claims == 1 and len(store.watches) == 1
    watch.active = False  # spent, say, by a claim whose rows are on their way
    pool.notified()
    await wait_for(lambda: store.claims == 2, 5.0, "a second claim", interval=0.001)


async def test_a_watch_that_filled_its_room_makes_the_pool_claim_itself(
    running: Running
) -> None:
    store = running.store
    running.gate.clear()  # the jobs hold their slots
    watch = await store.armed(1)
    watch.claim([row(i) for i in range(1, CONCURRENCY + 1)])
    await wait_for(lambda: len(running.started) == CONCURRENCY, 5.0, "a full pool", interval=0.001)
    running.gate.set()
    # there may be more than it could take
    await wait_for(lambda: store.claims == 2, 5.0,
                   "a second claim", interval=0.001)


async def test_a_watch_that_saw_more_notifications_makes_the_pool_claim_itself(
    running: Running
) -> None:
    store = running.store
    watch = await store.armed(1)
    watch.more = True
    watch.claim([row(1)])
    await wait_for(lambda: store.claims == 2, 5.0, "a second claim", interval=0.001)


async def test_jobs_of_a_claim_whose_commit_was_lost_run_on(running: Running) -> None:
    store = running.store
    watch = await store.armed(1)
    watch.claim([row(1)], UnreachableError("job_claim", "connection lost with the commit"))
    await wait_for(lambda: len(store.results) == 1, 5.0, "len(store.results) == 1", interval=0.001)
    assert running.started == [1] and store.results[0].outcome is Outcome.COMPLETED
    assert running.pool.claim_errors == 1


async def test_jobs_of_a_claim_that_rolled_back_stop(running: Running) -> None:
    store, pool = running.store, running.pool
    running.gate.clear()
    watch = await store.armed(1)
    watch.claim([row(1), row(2)], StoreError("job_claim", "the claim rolled back"))
    await wait_for(lambda: pool.claim_errors == 1 and not pool.running, 5.0,
                   "the claim error", interval=0.001)
    running.gate.set()
    await asyncio.sleep(0.02)
    assert store.results == []  # not this server's jobs: nothing written, no hand-back
    assert pool.claim_errors == 1


async def test_rows_a_stopping_pool_gets_from_its_watch_go_back(running: Running) -> None:
    store, pool = running.store, running.pool
    watch = await store.armed(1)
    stopping = asyncio.ensure_future(pool.stop_claiming())
    await asyncio.sleep(0)  # stop_claiming has begun: the pool no longer claims
    watch.claim([row(7)])
    await stopping
    await wait_for(lambda: len(store.results) == 1, 5.0, "len(store.results) == 1", interval=0.001)
    assert running.started == []
    assert store.results[0].outcome is Outcome.HANDED_BACK and store.results[0].job_id == 7


async def test_results_and_checkpoints_wait_for_the_claims_commit(running: Running) -> None:
    store, pool = running.store, running.pool
    watch = await store.armed(1)
    watch.committed.clear()
    watch.claim([row(1)])
    # the job is done
    await wait_for(lambda: running.started == [1] and not pool.running, 5.0,
                   "job 1 done", interval=0.001)
    checkpoint = asyncio.ensure_future(pool.settled(1))
    await asyncio.sleep(0.05)
    assert store.results == [] and not checkpoint.done()  # neither may reach the database
    watch.committed.set()
    await wait_for(lambda: len(store.results) == 1, 5.0, "len(store.results) == 1", interval=0.001)
    await asyncio.wait_for(checkpoint, 1)
    assert store.results[0].outcome is Outcome.COMPLETED


async def test_a_job_done_before_its_claim_rolled_back_writes_nothing(running: Running) -> None:
    store, pool = running.store, running.pool
    watch = await store.armed(1)
    watch.committed.clear()
    watch.claim([row(1)], StoreError("job_claim", "the claim rolled back"))
    # done, at the gate
    await wait_for(lambda: running.started == [1] and not pool.running, 5.0,
                   "job 1 done", interval=0.001)
    watch.committed.set()
    await wait_for(lambda: pool.claim_errors == 1, 5.0, "pool.claim_errors == 1", interval=0.001)
    await store.armed(2)  # the pool went on
    await asyncio.sleep(0.02)
    assert store.results == []
    store.claimable = [row(1)]  # the job, available again, comes back to this pool
    pool.wake()
    await wait_for(lambda: len(store.results) == 1, 5.0, "len(store.results) == 1", interval=0.001)
    assert running.started == [1, 1] and store.results[0].outcome is Outcome.COMPLETED
