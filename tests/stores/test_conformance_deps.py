"""Conformance: dependencies between jobs."""

from __future__ import annotations

import asyncio

from kiln._model._job import JobFilter, JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, complete, insert, job, result, state_of


async def test_dependent_waits_and_is_released_on_completion(store: Store) -> None:
    [a, b] = await insert(store, job(kind="a"), job(kind="b"))
    [c] = await insert(store, job(kind="c", depends_on=[a, b]))
    assert await state_of(store, c) == "awaiting"
    got = await store.job_get(c)
    assert got is not None and got.depends_on == [a, b]
    assert await store.job_dependents(a) == [c]
    [ra] = await store.job_claim("q", ["a"], 1, "s1")
    applied = await store.job_results_apply([result(ra)])
    assert applied.released == {} and await state_of(store, c) == "awaiting"
    [rb] = await store.job_claim("q", ["b"], 1, "s1")
    applied = await store.job_results_apply([result(rb)])
    assert applied.released == {"q": 1} and await state_of(store, c) == "available"


async def test_dependency_already_completed_means_available(store: Store) -> None:
    [a] = await insert(store, job())
    [row] = await claim(store)
    await complete(store, row)
    [c] = await insert(store, job(kind="c", depends_on=[a]))
    assert await state_of(store, c) == "available"


async def test_failure_keeps_dependents_awaiting_until_requeued_and_completed(store: Store) -> None:
    [a] = await insert(store, job())
    [c] = await insert(store, job(kind="c", depends_on=[a]))
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.FAILED, error="x")])
    assert await state_of(store, c) == "awaiting"
    assert await store.jobs_requeue(JobFilter(ids=(a,))) == 1
    assert await state_of(store, c) == "awaiting"
    [row] = await claim(store)
    await complete(store, row)
    assert await state_of(store, c) == "available"


async def test_deleting_a_dependency_releases_its_dependents(store: Store) -> None:
    [a, b] = await insert(store, job(), job())
    [c] = await insert(store, job(kind="c", depends_on=[a, b]))
    rows = await claim(store, limit=1)
    await store.job_results_apply([result(rows[0], Outcome.FAILED)])
    assert await store.jobs_delete(JobFilter(ids=(a,))) == 1
    assert await state_of(store, c) == "awaiting"  # b is still to do
    assert await store.jobs_delete(JobFilter(ids=(b,))) == 1
    assert await state_of(store, c) == "available"
    assert await store.job_dependents(a) == []


async def test_released_dependent_with_rate_key_goes_pending(store: Store) -> None:
    [a] = await insert(store, job())
    [c] = await insert(store, job(kind="c", depends_on=[a], rate_key="r"))
    [d] = await insert(store, job(kind="d", depends_on=[a], delay=60))
    [row] = await claim(store)
    await complete(store, row)
    assert await state_of(store, c) == "pending"
    assert await state_of(store, d) == "scheduled"


async def test_requeued_dependent_waits_again_for_unfinished_dependency(store: Store) -> None:
    [a] = await insert(store, job())
    [c] = await insert(store, job(kind="c", depends_on=[a]))
    assert await store.jobs_cancel(JobFilter(ids=(c,))) == 1
    assert await store.jobs_requeue(JobFilter(ids=(c,))) == 1
    assert await state_of(store, c) == "awaiting"


async def test_concurrent_completions_of_two_dependencies_release_once(
    store: Store, other_store: Store
) -> None:
    for _ in range(5):
        [a, b] = await insert(store, job(kind="a"), job(kind="b"))
        [c] = await insert(store, job(kind="c", depends_on=[a, b]))
        [ra] = await store.job_claim("q", ["a"], 1, "s1")
        [rb] = await other_store.job_claim("q", ["b"], 1, "s2")
        await asyncio.gather(
            store.job_results_apply([result(ra)]), other_store.job_results_apply([result(rb)])
        )
        assert await state_of(store, c) == "available"
        [rc] = await store.job_claim("q", ["c"], 1, "s1")
        await complete(store, rc)
    counts = {c.state: c.count for c in await store.job_counts()}
    assert counts == {JobState.COMPLETED: 15}
