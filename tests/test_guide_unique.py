"""docs/guide.md, "Unique jobs": its blocks run as written, on every store; the customer
sync (one waiting and one running, with a concurrency cap) with a claim between its
enqueues, as a server makes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import kiln
from kiln._model._job import DEFAULT_QUEUE, AttemptError, JobResult, JobRow, Outcome
from kiln.stores import store_from_url
from tests.support.docblocks import blocks_under_test, marked_block


def test_the_guides_unique_block(store_url: str) -> None:
    [block] = blocks_under_test("guide.md", __file__)[:1]
    namespace: dict[str, Any] = {"kiln": kiln, "url": store_url, "timedelta": timedelta}
    try:
        exec(block, namespace)
        app: kiln.App = namespace["app"]
        digest = namespace["digest"]
        assert digest.inserted
        again = app.enqueue("report.build", {"tenant": 1}, unique=namespace["hourly"])
        assert again == digest and not again.inserted
    finally:
        if "app" in namespace:
            namespace["app"].close()


class _Story:
    """The block's ``app``, with the server's part between its enqueues: the first
    job starts (a claim, as a server's pool makes) before the second is asked for."""

    def __init__(self, app: kiln.App, started: Callable[[], None]) -> None:
        self._app, self._started, self.enqueued = app, started, 0
        self.job = app.job

    def enqueue(self, kind: str, args: Any, **options: Any) -> kiln.EnqueueResult:
        got = self._app.enqueue(kind, args, **options)
        self.enqueued += 1
        if self.enqueued == 1:
            self._started()
        return got


async def _claim(url: str) -> list[JobRow]:
    store = store_from_url(url)
    await store.open()
    try:
        return await store.job_claim(DEFAULT_QUEUE, ["customer.sync"], 10, "s1", limited=True)
    finally:
        await store.close()


async def _retry(url: str, row: JobRow) -> None:
    store = store_from_url(url)
    await store.open()
    try:
        applied = await store.job_results_apply([JobResult(
            job_id=row.id, server_id="s1", attempt=row.attempt, outcome=Outcome.RETRY,
            run_at_delay=0.0, error=AttemptError(row.attempt, 0.0, "boom"),
            claimed_at=row.attempted_at)])
        assert applied.applied == 1
    finally:
        await store.close()


def test_one_waiting_and_one_running_per_customer(store_url: str) -> None:
    block = marked_block("guide.md", "unique-one-waiting")
    app = kiln.App(store_url)
    try:
        app.migrate()
        started: list[JobRow] = []
        story = _Story(app, lambda: started.extend(asyncio.run(_claim(store_url))))
        namespace: dict[str, Any] = {"kiln": kiln, "app": story}
        exec(block, namespace)
        first, second, third = namespace["first"], namespace["second"], namespace["third"]
        assert [r.id for r in started] == [first]  # the first sync runs
        assert first.inserted and second.inserted and second != first  # kept while one runs
        assert third == second and not third.inserted  # deduplicated while one waits
        assert asyncio.run(_claim(store_url)) == []  # max=1: the second waits for the first
        # the running sync fails and retries: it gave its key up as it started, so its
        # retry does not collide with the waiting one; both wait, one runs at a time
        asyncio.run(_retry(store_url, started[0]))
        again = asyncio.run(_claim(store_url))
        assert [r.id for r in again] == [second]  # enqueued before the retry's run_at
        # the second runs, the first's retry waits without a key: a new request is kept
        fourth = app.enqueue("customer.sync", {"customer": 7})
        assert fourth.inserted and fourth not in (first, second)
        fifth = app.enqueue("customer.sync", {"customer": 7})
        assert fifth == fourth and not fifth.inserted
        other = app.enqueue("customer.sync", {"customer": 8})  # another customer: its own
        assert other.inserted
    finally:
        app.close()
