"""A declaration that changes between two deploys: the jobs in flight follow the new
one (issue 39 items 3, 6, 9; docs/operating.md, "What happens to jobs in flight when a
declaration changes between deploys").

Version A of an app enqueues a backlog (and may run a server); version B, with the
declaration changed, starts a server in the test's loop. The handlers count how many
run at once, per tenant and in all, so a limit is seen held, lifted or changed by the
handlers themselves. On every store.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import kiln
from kiln._client._catalog import KindCatalog
from kiln.stores import store_from_url
from tests.integration.inprocess import Running, config
from tests.support.waits import wait_for

KIND = "tenant.sync"
WORK = 0.2  # seconds a job runs: long enough for the claims around it to overlap


@dataclasses.dataclass
class Peaks:
    """Jobs running at once, per tenant and in all, by the handlers' own count."""

    now: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    most: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    ran: list[int] = dataclasses.field(default_factory=list)

    async def handle(self, job: kiln.Job) -> None:
        for key in (str(job.args.get("tenant")), "*"):
            self.now[key] += 1
            self.most[key] = max(self.most[key], self.now[key])
        try:
            await asyncio.sleep(WORK)
        finally:
            for key in (str(job.args.get("tenant")), "*"):
                self.now[key] -= 1
            self.ran.append(job.id)


def version(url: str, peaks: Peaks, queue_limit: int | None = None, **options: Any) -> kiln.App:
    app = kiln.App(url)
    app.job(KIND, queue="q", **options)(peaks.handle)
    if queue_limit is not None:
        app.queue_concurrency("q", kiln.Concurrency(max=queue_limit))
    return app


@contextlib.asynccontextmanager
async def serving_queues(app: kiln.App, queues: dict[str, int]) -> AsyncIterator[Running]:
    running = await Running(app.server(queues, config=config())).started()
    try:
        yield running
    finally:
        await running.stop()


def serving(app: kiln.App, concurrency: int = 8) -> contextlib.AbstractAsyncContextManager[Running]:
    return serving_queues(app, {"q": concurrency})


async def completed(app: kiln.App, ids: list[int], timeout: float = 20,
                    state: str = "completed") -> None:
    client = app.client()
    done = kiln.filter_of(ids=ids, state=state)

    async def all_done() -> bool | None:
        return await client.count(done) == len(ids) or None

    await wait_for(all_done, timeout, f"jobs {ids} to be {state}")


async def drained_by(b: kiln.App, backlog: list[int], a: kiln.App) -> None:
    """B (the new version) serves until A's backlog has completed; both then close."""
    try:
        async with serving(b):
            await completed(b, backlog)
    finally:
        await a.aclose()
        await b.aclose()


async def enqueue(app: kiln.App, tenants: list[str]) -> list[int]:
    return [int(await app.aenqueue(KIND, {"tenant": t})) for t in tenants]


# a kind's concurrency limit (issue 39 item 3, audit H3) ---------------------------------
async def test_a_removed_limit_lets_the_backlog_run(store_url: str) -> None:
    peaks = Peaks()
    a = version(store_url, peaks, concurrency=kiln.Concurrency(max=1, key="args.tenant"))
    await a.amigrate()
    backlog = await enqueue(a, ["t1", "t1", "t1", "t2"])  # keyed under A's limit
    b = version(store_url, peaks)  # the limit removed
    try:
        async with serving(b):
            await completed(b, backlog)
            # a producer still on A (its web tier not yet redeployed) enqueues with the key
            late = await enqueue(a, ["t1", "t1"])
            await completed(b, late)
    finally:
        await a.aclose()
        await b.aclose()
    assert peaks.most["t1"] >= 2  # no longer limited to 1


async def test_a_limit_moved_to_the_queue_runs_the_backlog_under_it(store_url: str) -> None:
    peaks = Peaks()
    a = version(store_url, peaks, concurrency=kiln.Concurrency(max=1, key="args.tenant"))
    await a.amigrate()
    backlog = await enqueue(a, ["t1"] * 6)
    b = version(store_url, peaks, queue_limit=3)  # B caps the queue instead of the kind
    await drained_by(b, backlog, a)
    assert peaks.most["*"] == 3


async def test_an_added_limit_holds_for_the_backlog(store_url: str) -> None:
    peaks = Peaks()
    a = version(store_url, peaks)  # no limit: the backlog carries no key
    await a.amigrate()
    async with serving(a):  # A ran, and published its declaration
        pass
    backlog = await enqueue(a, ["t1"] * 4 + ["t2"] * 2)
    b = version(store_url, peaks, concurrency=kiln.Concurrency(max=1, key="args.tenant"))
    await drained_by(b, backlog, a)
    assert (peaks.most["t1"], peaks.most["t2"]) == (1, 1)
    assert peaks.most["*"] == 2  # the tenants still run side by side


async def test_a_raised_max_applies_to_the_backlog(store_url: str) -> None:
    peaks = Peaks()
    a = version(store_url, peaks, concurrency=kiln.Concurrency(max=1, key="args.tenant"))
    await a.amigrate()
    async with serving(a, concurrency=1):
        pass
    backlog = await enqueue(a, ["t1"] * 6)  # key rows at max 1
    b = version(store_url, peaks, concurrency=kiln.Concurrency(max=3, key="args.tenant"))
    await drained_by(b, backlog, a)
    assert peaks.most["t1"] == 3


async def test_a_changed_key_applies_to_the_backlog(store_url: str) -> None:
    peaks = Peaks()
    a = version(store_url, peaks, concurrency=kiln.Concurrency(max=1))  # one for the kind
    await a.amigrate()
    async with serving(a, concurrency=1):
        pass
    backlog = await enqueue(a, ["t1", "t1", "t2", "t2"])  # all under "kind:tenant.sync"
    b = version(store_url, peaks, concurrency=kiln.Concurrency(max=1, key="args.tenant"))
    await drained_by(b, backlog, a)
    assert (peaks.most["t1"], peaks.most["t2"], peaks.most["*"]) == (1, 1, 2)


# a queue's concurrency limit (issue 39 item 6, audit M3) --------------------------------
async def test_a_removed_queue_limit_is_lifted(store_url: str) -> None:
    peaks = Peaks()
    a = version(store_url, peaks, queue_limit=1)
    await a.amigrate()
    async with serving(a):  # A declared the queue's limit
        pass
    b = version(store_url, peaks)  # the limit removed from the code
    try:
        async with serving(b):
            await completed(b, await enqueue(b, [f"t{n}" for n in range(6)]))
            limits = await b.client().concurrency_in_use()
    finally:
        await a.aclose()
        await b.aclose()
    assert peaks.most["*"] >= 2 and "queue:q" not in limits


async def test_an_added_or_changed_queue_limit_holds(store_url: str) -> None:
    peaks = Peaks()
    a = version(store_url, peaks)
    await a.amigrate()
    backlog = await enqueue(a, [f"t{n}" for n in range(6)])
    b = version(store_url, peaks, queue_limit=2)  # added
    c = version(store_url, peaks, queue_limit=1)
    d = version(store_url, peaks, queue_limit=3)
    try:
        async with serving(b):
            await completed(b, backlog)
        assert peaks.most["*"] == 2
        peaks.most.clear()
        async with serving(c):  # a server declaring 1 runs beside a new version's 3
            async with serving(d):
                await completed(d, await enqueue(d, [f"t{n}" for n in range(9)]))
            assert peaks.most["*"] == 3  # the newest live declaration's max
    finally:
        for app in (a, b, c, d):
            await app.aclose()


# a kind declared after its first jobs were enqueued (issue 39 item 9) ------------------
async def test_jobs_enqueued_before_their_kind_was_declared_follow_it(store_url: str) -> None:
    """A producer without the handlers enqueues before any worker declaring the kind
    has started (a rolling deploy that adds a kind): once one starts, the jobs take the
    declaration's queue, attempts, priority, timeout and tags, and run there; an option
    the producer gave stays. A job enqueued by a producer whose catalog still misses
    the kind after it was published is adopted by the next pass."""
    workers = kiln.App(store_url)
    await workers.amigrate()

    @workers.job("t.mail", queue="mail", max_attempts=2, priority=-5, timeout=30,
                 tags=["mail"], backoff=kiln.Constant(0.01))
    async def send(job: kiln.Job) -> None:
        if job.args.get("fail"):
            raise RuntimeError("smtp down")

    store = store_from_url(store_url)  # a producer whose catalog reads once, for the test
    producer = kiln.Client(store, catalog=KindCatalog(store, miss_interval=3600))
    await producer.open()
    try:
        plain = int(await producer.enqueue("t.mail", {}))
        failing = int(await producer.enqueue("t.mail", {"fail": True}))
        given = int(await producer.enqueue("t.mail", {}, queue="mail", max_attempts=7))
        before = await producer.get(plain)
        assert before is not None and (before.queue, before.max_attempts) == ("default", 25)
        async with serving_queues(workers, {"mail": 4}):
            late = int(await producer.enqueue("t.mail", {}))  # its catalog still misses
            await completed(workers, [plain, given, late])
            await completed(workers, [failing], state="failed")
            rows: dict[int, kiln.JobRow] = {}
            for i in (plain, failing, given, late):
                row = await producer.get(i)
                assert row is not None
                rows[i] = row
    finally:
        await producer.close()
        await workers.aclose()
    first = rows[plain]
    assert (first.queue, first.max_attempts, first.priority, first.timeout, first.tags) == (
        "mail", 2, -5, 30.0, ["mail"])
    assert (rows[late].queue, rows[late].max_attempts) == ("mail", 2)
    assert (rows[given].queue, rows[given].max_attempts) == ("mail", 7)  # given: kept
    assert (rows[failing].state, rows[failing].attempt) == (kiln.JobState.FAILED, 2)


async def test_jobs_enqueued_before_their_kind_was_declared_take_its_limits(
    store_url: str,
) -> None:
    peaks = Peaks()
    producer = kiln.App(store_url)  # no handlers
    await producer.amigrate()
    ids = await enqueue(producer, ["t1"] * 4 + ["t2"] * 2)
    b = version(store_url, peaks, concurrency=kiln.Concurrency(max=1, key="args.tenant"),
                rate_limit=kiln.RateLimit(rate=100))
    try:
        async with serving(b):
            await completed(b, ids)
            rows = [await b.client().get(i) for i in ids]
    finally:
        await producer.aclose()
        await b.aclose()
    assert (peaks.most["t1"], peaks.most["t2"]) == (1, 1)
    assert all(r is not None and r.admitted_at is not None for r in rows)  # rate limited
