"""Conformance: bulk actions in batches (kiln._client._bulk) on every store.

A run is bound when it begins (the newest matching id; the finish time when it selects
finished states), walks the matching ids newest first with the keyset listing, and
applies one store call per batch, each followed by its audit entry. Interrupted after a
batch, it leaves whole batches applied and nothing else; a run with the same bounds
finishes the rest, and still leaves alone what matched only later.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kiln import Unique
from kiln._client._bulk import Bulk, Progress
from kiln._client._client import Client
from kiln._errors import StoreError, ValidationError
from kiln._model._build import build_job
from kiln._model._job import AttemptError, JobFilter, JobResult, JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result

FAILED = JobFilter(states=(JobState.FAILED,))


async def _failed(store: Store, n: int, queue: str = "q") -> list[int]:
    ids = await insert(store, *[job(args={"i": i}, queue=queue) for i in range(n)])
    rows = await claim(store, limit=n, queue=queue)
    assert sorted(r.id for r in rows) == ids
    applied = await store.job_results_apply([
        JobResult(job_id=r.id, server_id="s1", attempt=r.attempt, outcome=Outcome.FAILED,
                  error=AttemptError(r.attempt, 0.0, "boom"))
        for r in rows
    ])
    assert applied.applied == n
    return ids


async def _states(store: Store, ids: list[int]) -> list[str | None]:
    rows = {r.id: r.state.value for r in await store.job_list(JobFilter(ids=tuple(ids)),
                                                               limit=1000)}
    return [rows.get(i) for i in ids]


def _spy(store: Store, method: str, calls: list[JobFilter], fail_on: int = 0) -> None:
    """Record each call of ``store.method``; with ``fail_on``, that call raises before
    it reaches the database, as a connection lost between two batches would."""
    original = getattr(store, method)

    async def spied(f: JobFilter, *args: Any) -> int:
        calls.append(f)
        if len(calls) == fail_on:
            raise StoreError(method, "connection lost (injected)")
        n: int = await original(f, *args)
        return n

    setattr(store, method, spied)


async def test_requeue_in_batches_touches_what_was_counted(store: Store) -> None:
    ids = await _failed(store, 17)
    client = Client(store)
    bulk = await Bulk.begin(client, "requeue", FAILED, actor="ops", batch_size=5)
    assert bulk.progress.total == 17 and bulk.filter.max_id == max(ids)
    assert bulk.filter.finished_before is not None
    later = await _failed(store, 2, "q2")  # fail after the run was bound: left alone
    calls: list[JobFilter] = []
    _spy(store, "jobs_requeue", calls)
    seen: list[Progress] = []
    final = await bulk.run(seen.append)
    assert (final.done, final.seen, final.batches, final.finished) == (17, 17, 4, True)
    assert [len(c.ids) for c in calls] == [5, 5, 5, 2]  # one store call per batch
    assert [p.done for p in seen] == [5, 10, 15, 17, 17] and seen[-1].finished
    assert await _states(store, ids) == ["available"] * 17
    assert await _states(store, later) == ["failed"] * 2
    entries = sorted(await store.audit_list(10), key=lambda e: e.detail["batch"])
    assert [(e.action, e.actor, e.count) for e in entries] == [("requeue", "ops", 5)] * 3 + [
        ("requeue", "ops", 2)]
    assert {e.detail["run"] for e in entries} == {bulk.run_id}
    assert {e.detail["total"] for e in entries} == {17}
    assert entries[0].detail["last_id"] == max(ids)  # newest first
    assert entries[-1].detail["first_id"] == min(ids)
    assert entries[0].detail["max_id"] == max(ids)


async def test_job_ids_pages_as_job_list_does(store: Store) -> None:
    ids = await insert(store, *[job(args={"i": i}, tags=("t",) if i % 2 else ())
                                for i in range(9)])
    for f in (JobFilter(queue="q"), JobFilter(tags=("t",)), JobFilter(args={"i": 3}),
              JobFilter(states=(JobState.AVAILABLE,), max_id=ids[6])):
        for before in (None, ids[5], ids[0]):
            listed = [r.id for r in await store.job_list(f, 3, before_id=before)]
            assert await store.job_ids(f, 3, before) == listed, (f, before)
    assert await store.job_ids(JobFilter(queue="q"), 100) == sorted(ids, reverse=True)


async def test_cancel_and_delete_in_batches(store: Store) -> None:
    waiting = await insert(store, *[job(args={"i": i}) for i in range(9)])
    client = Client(store)
    cancel = await Bulk.begin(client, "cancel", JobFilter(queue="q"), batch_size=4)
    newer = await insert(store, job())
    done = await cancel.run()
    assert (done.done, done.batches) == (9, 3)
    assert await _states(store, waiting) == ["cancelled"] * 9
    assert await _states(store, newer) == ["available"]
    delete = await Bulk.begin(client, "delete", JobFilter(states=(JobState.CANCELLED,)),
                              batch_size=4)
    assert delete.progress.total == 9
    assert (await delete.run()).done == 9
    assert await _states(store, waiting) == [None] * 9
    assert await _states(store, newer) == ["available"]


async def test_interrupted_run_leaves_whole_batches_and_a_rerun_finishes(
    store: Store,
) -> None:
    ids = await _failed(store, 12)
    client = Client(store)
    bulk = await Bulk.begin(client, "requeue", FAILED, batch_size=5)
    calls: list[JobFilter] = []
    _spy(store, "jobs_requeue", calls, fail_on=2)
    with pytest.raises(StoreError, match="injected"):
        await bulk.run()
    assert (bulk.progress.done, bulk.progress.batches, bulk.progress.finished) == (5, 1, False)
    states = await _states(store, ids)
    assert states == ["failed"] * 7 + ["available"] * 5  # the first (newest) batch, whole
    assert [e.count for e in await store.audit_list(10)] == [5]  # the applied batch only
    later = await _failed(store, 1, "q2")  # fails between the runs: outside the bounds
    [redone] = await claim(store, limit=1)  # a requeued job runs and fails again: too
    await store.job_results_apply([result(redone, Outcome.FAILED, error="again")])

    setattr(store, "jobs_requeue", type(store).jobs_requeue.__get__(store))  # noqa: B010
    again = await Bulk.begin(client, "requeue", bulk.filter, batch_size=5)
    assert again.filter == bulk.filter and again.progress.total == 7
    assert (await again.run()).done == 7
    assert await _states(store, ids) == [
        "failed" if i == redone.id else "available" for i in ids]
    assert await _states(store, later) == ["failed"]
    assert sorted(e.count for e in await store.audit_list(10)) == [2, 5, 5]


async def test_of_two_jobs_of_one_unique_key_in_two_batches_the_newest_goes_back(
    store: Store,
) -> None:
    ids = []
    for _ in range(2):  # failed frees the key for the second
        [job_id] = await store.job_insert_many(
            [build_job("k", {"tenant": 9}, None, queue="q", unique=Unique(by=("args",)))])
        [row] = await claim(store)
        await store.job_results_apply([result(row, Outcome.FAILED, error="boom")])
        ids.append(int(job_id))
    bulk = await Bulk.begin(Client(store), "requeue", FAILED, batch_size=1)
    final = await bulk.run()
    assert (final.done, final.seen, final.batches) == (1, 2, 2)
    assert await _states(store, ids) == ["failed", "available"]  # as one requeue does


async def test_bad_bulk_input_is_refused_before_any_write(store: Store) -> None:
    ids = await _failed(store, 2)
    client = Client(store)
    with pytest.raises(ValidationError, match="unknown bulk action 'purge'"):
        await Bulk.begin(client, "purge", FAILED)
    with pytest.raises(ValidationError, match="batch size must be between 1 and 1000"):
        await Bulk.begin(client, "requeue", FAILED, batch_size=0)
    with pytest.raises(ValidationError, match="needs a max_id bound"):
        Bulk(client, "requeue", FAILED, 2)
    bound = dataclasses.replace(FAILED, max_id=0)  # bound to nothing: nothing changes
    assert (await Bulk(client, "requeue", bound, 0).run()).done == 0
    assert await _states(store, ids) == ["failed"] * 2
    assert await store.audit_list(10) == []
