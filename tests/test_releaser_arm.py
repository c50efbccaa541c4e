"""A job announced while the releaser's statement runs is not forgotten.

The statement's snapshot can predate the job (a retry written by the completer at the
same moment): the next due time it returns, a later job's, must not replace the
earlier one announced meanwhile, or the retry waits for poll_interval (the
test_releaser.py flake in CI: 5.6 s instead of two 0.5 s backoffs)."""

from __future__ import annotations

import asyncio
from typing import cast

from kiln._events import EventHub
from kiln._server._releaser import Releaser
from kiln.stores import Store
from kiln.stores._protocol import ReleaseResult


class _SlowRelease:
    """A store whose release statement waits until the test lets it answer."""

    def __init__(self, next_at: float) -> None:
        self.running = asyncio.Event()
        self.answer = asyncio.Event()
        self.next_at = next_at

    async def jobs_release_due(self) -> ReleaseResult:
        self.running.set()
        await self.answer.wait()
        return ReleaseResult(released={}, next_at=self.next_at)


def releaser(store: _SlowRelease) -> Releaser:
    return Releaser(store=cast(Store, store), events=EventHub(), release_interval=0.1,
                    poll_interval=5.0, notified=lambda: True,
                    on_released=lambda released, reason: None)


async def test_an_arm_during_the_release_statement_outlives_its_answer() -> None:
    store = _SlowRelease(next_at=30.0)  # the statement saw only a job due in 30 s
    r = releaser(store)
    release = asyncio.create_task(r.run_once())
    await store.running.wait()
    r.arm(0.5)  # a retry due in 0.5 s, written while the statement ran
    store.answer.set()
    await release
    assert r.next_delay({}) <= 0.5


async def test_without_an_arm_the_statements_answer_decides() -> None:
    store = _SlowRelease(next_at=2.0)
    r = releaser(store)
    r.arm(0.1)  # before the pass: the pass itself looks, so its answer replaces it
    store.answer.set()
    await r.run_once()
    assert 1.5 < r.next_delay({}) <= 2.0
