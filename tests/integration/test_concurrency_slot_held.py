"""A fleet-wide concurrency slot is held until the attempt has really ended (issue 39
item 4), on every store: cancelling a running limited job, or a plain def's timeout,
never lets a second handler of a ``max=1`` key (or queue) start while the first one
still runs. Each handler records when it started and ended; no two intervals overlap.

The handlers outlive kill_grace on purpose (a plain def finishing the request it is in,
an async def cleaning up after its cancellation), so each case would overlap if the
cancel or the timeout freed the slot.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest

import kiln
from tests.integration.inprocess import Running, config, open_store
from tests.support.waits import wait_for

STEP = 1.2  # what a handler still does after it was told to stop (> kill_grace 0.2)


class Spans:
    """Start and end of every handler run (thread-safe: plain defs run in threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started: dict[int, float] = {}
        self.ended: dict[int, float] = {}

    def start(self, job_id: int) -> None:
        with self.lock:
            self.started[job_id] = time.monotonic()

    def end(self, job_id: int) -> None:
        with self.lock:
            self.ended[job_id] = time.monotonic()

    def assert_never_two_at_once(self) -> None:
        with self.lock:
            spans = sorted((self.started[j], self.ended.get(j, float("inf")), j)
                           for j in self.started)
        for (_, end, first), (start, _, second) in itertools.pairwise(spans):
            assert start >= end, (
                f"job {second} started {end - start:.2f}s before job {first} ended: {spans}")


def app_of(url: str, spans: Spans, *, queue_limit: bool) -> kiln.App:
    app = kiln.App(url)
    limit = None if queue_limit else kiln.Concurrency(max=1)
    if queue_limit:
        app.queue_concurrency("default", kiln.Concurrency(max=1))

    @app.job("finishes.step", concurrency=limit, max_attempts=1)
    def finishes_step(job: kiln.Job) -> None:  # a plain def: ends the request it is in
        spans.start(job.id)
        try:
            job.cancelled.wait(30)
            time.sleep(STEP)
        finally:
            spans.end(job.id)

    @app.job("overruns", concurrency=limit, max_attempts=1, timeout=0.3)
    def overruns(job: kiln.Job) -> None:  # ignores its timeout for STEP more
        spans.start(job.id)
        try:
            time.sleep(0.3 + STEP)
        finally:
            spans.end(job.id)

    @app.job("cleans.up", concurrency=limit, max_attempts=1)
    async def cleans_up(job: kiln.Job) -> None:  # cleanup after its cancellation
        spans.start(job.id)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(STEP)
            raise
        finally:
            spans.end(job.id)

    return app


CASES = [("finishes.step", True), ("cleans.up", True), ("overruns", False)]


@pytest.mark.parametrize("queue_limit", [False, True], ids=["key", "queue"])
@pytest.mark.parametrize(("kind", "cancel"), CASES, ids=[c[0] for c in CASES])
async def test_a_slot_is_held_until_the_handler_ends(
    store_url: str, kind: str, cancel: bool, queue_limit: bool
) -> None:
    spans = Spans()
    app = app_of(store_url, spans, queue_limit=queue_limit)
    store = await open_store(store_url)
    client = kiln.Client(store, app.kinds)
    try:
        running = await Running(app.server({"default": 4}, config())).started()
        try:
            first = await client.enqueue(kind, {"n": 1})
            second = await client.enqueue(kind, {"n": 2})
            await wait_for(lambda: first in spans.started, 10, "the first job to start")
            if cancel:
                await client.cancel(kiln.filter_of(ids=[first]), actor="ops")
            # the second job runs once the first handler ended, and then ends itself
            if kind != "overruns":
                await wait_for(lambda: second in spans.started, 15, "the second job to start")
                await client.cancel(kiln.filter_of(ids=[second]), actor="ops")
            await wait_for(lambda: second in spans.ended, 15, "the second job to end")
            spans.assert_never_two_at_once()
            row = await client.get(first)
            assert row is not None
            expected = kiln.JobState.CANCELLED if cancel else kiln.JobState.FAILED
            assert row.state is expected, row.state
        finally:
            await running.stop()
    finally:
        await store.close()
        await app.aclose()

