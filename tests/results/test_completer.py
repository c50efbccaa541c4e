"""The completer isolates a result the store refuses, reports a results path that
cannot write, and notices at once when its writer task crashes (issue 22).

The store is real (each backend); a thin wrapper refuses the results of chosen jobs
the way a database refuses a value, or returns garbage, to reach the paths that
sanitising makes rare.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import kiln
import kiln.events
from kiln import JobState, StoreError
from kiln._model._job import JobResult
from kiln.stores import Store, store_from_url
from tests.support.results import Serve
from tests.support.waits import wait_for


class Refusing:
    """A real store whose ``job_results_apply`` refuses batches holding chosen jobs."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.refuse: set[int] = set()
        self.refuse_replacements = False  # refuse the failed attempt kiln writes instead
        self.refuse_all = False
        self.contend = 0  # refuse this many writes as a lock timeout does (contended)
        self.garbage = 0  # return this many non-results (a broken store: the writer crashes)
        self.calls: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def job_results_apply(self, results: Sequence[JobResult]) -> Any:
        self.calls.append([r.job_id for r in results])
        if self.garbage:
            self.garbage -= 1
            return None
        if self.refuse_all:
            raise StoreError("job_results_apply", "value too long for the column")
        if self.contend:
            self.contend -= 1
            raise StoreError("job_results_apply", "canceling statement due to statement"
                             " timeout", contended=True)
        for r in results:
            replacement = r.error is not None and r.error.error.startswith("kiln could not")
            if r.job_id in self.refuse and (self.refuse_replacements or not replacement):
                raise StoreError("job_results_apply", f"refused the result of {r.job_id}")
        return await self._store.job_results_apply(results)


def app_of(url: str) -> kiln.App:
    app = kiln.App(url)

    @app.job("good", queue="q")
    async def good(job: kiln.Job) -> None:
        await asyncio.sleep(0.05)

    @app.job("bad", queue="q", max_attempts=3)
    async def bad(job: kiln.Job) -> None:
        await asyncio.sleep(0.05)
        raise RuntimeError("this one is refused")

    return app


async def refusing(url: str) -> Refusing:
    store = store_from_url(url)
    return Refusing(store)


async def enqueue(app: kiln.App, good: int, bad: int) -> tuple[Sequence[int], Sequence[int]]:
    client = app.client()
    await app.amigrate()
    goods = [await client.enqueue("good", {"i": i}) for i in range(good)]
    bads = [await client.enqueue("bad", {"i": i}) for i in range(bad)]
    return goods, bads


async def states(app: kiln.App, ids: Sequence[int]) -> list[JobState | None]:
    rows = [await app.client().get(i) for i in ids]
    return [None if r is None else r.state for r in rows]


async def test_a_refused_result_is_written_as_a_failed_attempt_and_the_rest_complete(
    store_url: str, serve: Serve
) -> None:
    app = app_of(store_url)
    goods, [bad] = await enqueue(app, 6, 1)
    store = await refusing(store_url)
    store.refuse.add(bad)
    server = await serve(app, {"q": 8}, store=store)

    async def done() -> bool:
        s = await states(app, [*goods, bad])
        return all(x is JobState.COMPLETED for x in s[:-1]) and s[-1] is JobState.SCHEDULED

    await wait_for(done, 15, "good jobs completed, the bad one retried")
    row = await app.client().get(bad)
    assert row is not None and row.attempt == 1
    assert row.errors[-1].error.startswith("kiln could not write this attempt's result (retry)")
    assert "refused the result of" in row.errors[-1].error
    assert server.stats().results_poisoned >= 1 and server.stats().results_dropped == 0
    assert any(len(c) > 1 and bad in c for c in store.calls), "the bad one came in a batch"
    assert server.healthy(), server.healthy().reasons
    await app.aclose()


async def test_a_result_that_cannot_be_written_at_all_is_dropped_not_holding_others(
    store_url: str, serve: Serve
) -> None:
    app = app_of(store_url)
    goods, [bad] = await enqueue(app, 6, 1)
    store = await refusing(store_url)
    store.refuse.add(bad)
    store.refuse_replacements = True
    server = await serve(app, {"q": 8}, store=store)

    async def done() -> bool:
        s = await states(app, goods)
        return all(x is JobState.COMPLETED for x in s) and server.stats().results_dropped == 1

    more: list[int] = []

    async def good_ones_keep_flowing() -> bool:  # each write of others is progress
        more.append(await app.client().enqueue("good", {}))
        return await done()

    await wait_for(good_ones_keep_flowing, 20, "good jobs completed, the bad one dropped")
    assert (await states(app, [bad])) == [JobState.RUNNING]  # left to reconciliation
    assert server.stats().results_pending <= len(more)
    await app.aclose()


async def test_a_store_that_refuses_every_result_makes_the_server_unhealthy(
    store_url: str, serve: Serve
) -> None:
    app = app_of(store_url)
    goods, _ = await enqueue(app, 3, 0)
    store = await refusing(store_url)
    store.refuse_all = True
    server = await serve(app, {"q": 8}, store=store)

    async def unhealthy() -> bool:
        return not server.healthy()

    await wait_for(unhealthy, 10, "unhealthy while no result can be written")
    health = server.healthy()
    assert health.results_stuck
    assert any(r.startswith("results not written for") for r in health.reasons), health.reasons
    assert server.stats().results_dropped == 0  # nothing else got written: no drop
    store.refuse_all = False

    async def recovered() -> bool:
        s = await states(app, goods)
        return all(x is JobState.COMPLETED for x in s) and bool(server.healthy())

    await wait_for(recovered, 15, "written and healthy once the store accepts them")
    await app.aclose()


async def test_a_crashed_results_writer_is_reported_at_once_and_restarted(
    store_url: str, serve: Serve
) -> None:
    app = app_of(store_url)
    store = await refusing(store_url)
    store.garbage = 1  # the next write returns None: the writer task raises
    crashes: list[kiln.events.CompleterCrashed] = []
    server = await serve(app, {"q": 8}, store=store)
    server.events.subscribe(crashes.append, types=[kiln.events.CompleterCrashed])
    goods, _ = await enqueue(app, 3, 0)

    async def crashed() -> bool:
        return bool(crashes)

    await wait_for(crashed, 10, "the crash reported")
    health = server.healthy()
    assert not health and health.results_stuck
    assert any("results writer" in r for r in health.reasons), health.reasons
    assert server.stats().completer_crashes == 1

    async def completed() -> bool:
        return all(x is JobState.COMPLETED for x in await states(app, goods))

    await wait_for(completed, 15, "the restarted writer wrote the results")
    assert server.stats().results_pending == 0
    await app.aclose()


async def test_a_contended_write_is_written_later_and_a_completion_stays_completed(
    store_url: str, serve: Serve
) -> None:
    # a lock or statement timeout is not a bad result: no replacement, written as it is
    # once the lock is gone (issue 39 item 2)
    app = app_of(store_url)

    @app.job("report", queue="q")
    async def report(job: kiln.Job) -> dict[str, int]:
        return {"rows": 42}

    goods, _ = await enqueue(app, 3, 0)
    reports = [await app.client().enqueue("report", {}) for _ in range(2)]
    store = await refusing(store_url)
    store.contend = 4
    server = await serve(app, {"q": 8}, store=store)

    async def completed() -> bool:
        return all(x is JobState.COMPLETED for x in await states(app, [*goods, *reports]))

    await wait_for(completed, 15, "written once the contention ended")
    for job_id in reports:
        row = await app.client().get(job_id)
        assert row is not None and row.result == {"rows": 42} and row.attempt == 1
        assert row.errors == []
    assert server.stats().results_poisoned == 0
    assert server.healthy(), server.healthy().reasons
    await app.aclose()
