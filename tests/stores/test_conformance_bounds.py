"""Conformance: the upper bounds of a JobFilter (max_id, finished_before), which bind a
bulk action to what its confirmation showed, in listing, counting and every bulk
operation, on every store."""

from __future__ import annotations

import dataclasses

from kiln._model._job import JobFilter, JobRow, JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result, state_of

FAILED = (JobState.FAILED,)


async def _fail(store: Store, rows: list[JobRow]) -> None:
    await store.job_results_apply([result(r, Outcome.FAILED, error="boom") for r in rows])


async def test_a_bound_leaves_out_what_failed_after_it(store: Store) -> None:
    """Four running jobs; the newest fails, the bound is taken, then the other three fail."""
    ids = await insert(store, job(), job(), job(), job())
    rows = sorted(await claim(store, limit=4), key=lambda r: r.id)
    await _fail(store, [rows[-1]])
    shown = dataclasses.replace(JobFilter(states=FAILED), max_id=rows[-1].id,
                                finished_before=await store.now())
    await _fail(store, rows[:-1])
    assert await store.job_count(JobFilter(states=FAILED)) == 4
    assert await store.job_count(shown) == 1
    assert [r.id for r in await store.job_list(shown)] == [ids[-1]]
    assert await store.jobs_requeue(shown) == 1
    assert [await state_of(store, i) for i in ids] == ["failed"] * 3 + ["available"]


async def test_max_id_bounds_every_operation(store: Store) -> None:
    ids = await insert(store, job(), job(), job())
    below = JobFilter(max_id=ids[1])
    assert await store.job_count(below) == 2
    assert sorted(r.id for r in await store.job_list(below)) == ids[:2]
    assert await store.jobs_cancel(dataclasses.replace(below, max_id=ids[0])) == 1
    assert await store.jobs_requeue(dataclasses.replace(below, max_id=ids[0])) == 1
    assert await store.jobs_delete(below) == 2
    assert [await state_of(store, i) for i in ids] == [None, None, "available"]


async def test_finished_before_matches_no_unfinished_job(store: Store) -> None:
    [waiting] = await insert(store, job())
    now = await store.now()
    assert await store.job_count(JobFilter(finished_before=now)) == 0
    assert await store.jobs_delete(JobFilter(finished_before=now)) == 0
    assert await state_of(store, waiting) == "available"
    assert await store.jobs_cancel(JobFilter(ids=(waiting,))) == 1
    assert await store.job_count(JobFilter(finished_before=await store.now())) == 1
    assert await store.job_count(JobFilter(finished_before=now)) == 0  # cancelled after it
