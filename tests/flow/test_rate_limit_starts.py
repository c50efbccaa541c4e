"""The rate bound holds on starts across a pause and an outage (issue 40 build item 2),
on every store.

Nothing is admitted for a queue that is paused or that no live server serves, so
admitted jobs do not pile up ``available`` and start together when the queue runs
again (before: ``RateLimit(5, per=1, burst=1)``, a 14 s pause, 60 jobs started in one
second). The bound stated in docs/rate-limits.md: after a pause or an outage, no window
of ``per`` starts more than ``rate + 2 * max(burst, 1) + ceil(rate * AHEAD / per)``
jobs of a key (the rate, the bucket's content, and what the last admission rounds
before the stop had admitted and was not yet claimed: the bucket's content then and
AHEAD seconds of the rate, admitted ahead). Each handler records when it started.
"""

from __future__ import annotations

import asyncio
import math
import time

import kiln
from kiln._server.maintenance.admitter import AHEAD
from tests.integration.inprocess import Running, config, open_store
from tests.support.waits import wait_for

LIMIT = kiln.RateLimit(5, per=1)
BOUND = LIMIT.rate + 2 * max(LIMIT.burst, 1) + math.ceil(LIMIT.rate * AHEAD / LIMIT.per)
STOP = 10.0  # seconds the queue is paused, or its only worker stopped


def _app(url: str, starts: list[float]) -> kiln.App:
    app = kiln.App(url)

    @app.job("mail.send", queue="mail", rate_limit=LIMIT)
    async def send(job: kiln.Job) -> None:
        starts.append(time.monotonic())

    @app.job("billing.run", queue="billing")
    async def bill(job: kiln.Job) -> None: ...

    return app


def _most_in_a_window(starts: list[float], per: float) -> int:
    ordered = sorted(starts)
    most, j = 0, 0
    for i, t in enumerate(ordered):
        while ordered[j] <= t - per:
            j += 1
        most = max(most, i - j + 1)
    return most


async def _backlog(app: kiln.App, n: int) -> None:
    await app.aenqueue_many([("mail.send", {"i": i}) for i in range(n)])


async def test_a_paused_queue_starts_at_its_rate_when_resumed(store_url: str) -> None:
    starts: list[float] = []
    app = _app(store_url, starts)
    store = await open_store(store_url)
    client = kiln.Client(store, app.kinds)
    try:
        running = await Running(app.server({"mail": 20}, config())).started()
        try:
            await _backlog(app, 120)
            await wait_for(lambda: len(starts) >= 3, 10, "the first jobs to start")
            await client.pause_queue("mail", actor="test")
            # the pause reaches the server's governor (a wait on its state, not on the
            # clock: a loaded machine takes longer), then a claim already out returns
            await wait_for(lambda: running.server.stats().queues["mail"].paused, 10,
                           "the pause to reach the server")
            await asyncio.sleep(0.5)
            paused_at = len(starts)
            await asyncio.sleep(STOP)
            assert len(starts) - paused_at <= 1, "jobs started while the queue was paused"
            await client.resume_queue("mail", actor="test")
            resumed = time.monotonic()
            await wait_for(lambda: sum(t > resumed for t in starts) >= 12, 15,
                           "jobs to start after the resume")
        finally:
            await running.stop()
        after = [t for t in starts if t > resumed]
        assert _most_in_a_window(after, LIMIT.per) <= BOUND, sorted(after)[:12]
    finally:
        await store.close()
        await app.aclose()


async def test_a_queue_without_live_workers_starts_at_its_rate_when_they_come_back(
    store_url: str,
) -> None:
    # the mail workers are down while a billing-only worker (which runs an admitter
    # like every server) carries on
    starts: list[float] = []
    app = _app(store_url, starts)
    store = await open_store(store_url)
    try:
        billing = await Running(app.server({"billing": 2}, config())).started()
        try:
            mail = await Running(app.server({"mail": 20}, config())).started()
            await _backlog(app, 120)
            await wait_for(lambda: len(starts) >= 3, 10, "the first jobs to start")
            await mail.stop()
            await asyncio.sleep(STOP)
            back = time.monotonic()
            mail = await Running(app.server({"mail": 20}, config())).started()
            try:
                await wait_for(lambda: sum(t > back for t in starts) >= 12, 15,
                               "jobs to start after the workers came back")
            finally:
                await mail.stop()
        finally:
            await billing.stop()
        after = [t for t in starts if t > back]
        assert _most_in_a_window(after, LIMIT.per) <= BOUND, sorted(after)[:12]
    finally:
        await store.close()
        await app.aclose()
