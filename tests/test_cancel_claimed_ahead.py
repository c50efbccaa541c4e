"""A job cancelled while it waits for its handler (claimed ahead, or its task not in the
handler yet) never runs its handler (issue 39, the audit's suspicion S1).

The canceller looked only at running handlers; a job claimed ahead at the moment of
the cancel notification's look started some 20 ms later and, when quick, ran in full
before the next periodic look, its side effects happening after ``cancel()`` returned.
Now the look also covers the claimed rows, and an attempt found cancelled there ends
as cancelled when its turn comes, without calling the handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any, cast

from kiln._events import EventHub, JobCancelled
from kiln._model._job import CancelRequest, JobRow, Outcome
from kiln._server._canceller import Canceller
from kiln._server._pool import Pool
from kiln.stores import Store
from tests.support.parts import pool_for_test, row
from tests.test_pool import FakeStore


class Ahead:
    """A pool's view for the canceller: nothing running, ``rows`` claimed ahead."""

    def __init__(self, rows: list[JobRow]) -> None:
        self.running: dict[asyncio.Task[Any], JobRow] = {}
        self.rows = rows

    def claimed_ahead(self) -> list[JobRow]:
        return self.rows


class CancelStore:
    def __init__(self, cancelled: Iterable[int]) -> None:
        self.cancelled = set(cancelled)
        self.asked: list[list[int]] = []

    async def jobs_cancel_requested(self, ids: Sequence[int]) -> list[CancelRequest]:
        self.asked.append(list(ids))
        return [CancelRequest(id=i, attempt=1, server_id="s1", age=0.01)
                for i in ids if i in self.cancelled]


async def test_a_look_covers_the_jobs_claimed_ahead() -> None:
    ran: list[int] = []

    async def handler(job: Any) -> None:
        ran.append(job.id)

    parts = pool_for_test(FakeStore(0), handler)
    store = CancelStore(cancelled=[2])
    events = EventHub()
    canceller = Canceller(
        store=cast(Store, store), events=events, executor=parts.executor,
        pools=lambda: cast(Iterable[Pool], [Ahead([row(1), row(2)])]), interval=1.0,
    )
    await canceller.run_once()
    assert store.asked == [[1, 2]]
    assert parts.executor.cancelled_before_start(row(1)) is None
    result = parts.executor.cancelled_before_start(row(2))
    assert result is not None and result.outcome is Outcome.CANCELLED
    assert parts.executor.cancelled_before_start(row(2)) is None  # once
    assert ran == []
    parts.threads.shutdown()


async def test_a_pool_ends_an_attempt_cancelled_before_its_handler_as_cancelled() -> None:
    store = FakeStore(3)
    ran: list[int] = []
    cancels: list[JobCancelled] = []

    async def handler(job: Any) -> None:
        ran.append(job.id)

    parts = pool_for_test(store, handler, concurrency=1)
    store.pool = parts.pool
    parts.events.subscribe(cancels.append, types=[JobCancelled])
    parts.events.start()
    parts.executor.cancelled_early = {(2, 1): 0.0}  # as a look over the claimed rows leaves it
    await parts.start()
    async with asyncio.timeout(10):
        while len(store.results) < 3:
            await asyncio.sleep(0.005)
    await parts.stop()
    await parts.events.stop()
    assert ran == [1, 3]
    outcomes = {r.job_id: r.outcome for r in store.results}
    assert outcomes == {1: Outcome.COMPLETED, 2: Outcome.CANCELLED, 3: Outcome.COMPLETED}
    assert [c.job.id for c in cancels] == [2]
