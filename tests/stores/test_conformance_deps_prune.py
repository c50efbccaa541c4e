"""Conformance: pruning a dependency frees its dependents as deleting it does, and the
sweep releases dependents left waiting on jobs that no longer exist. Ages wait on the
database clock (``clock.advance``, tests/stores/clock.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kiln._model._job import JobFilter, JobState, Outcome
from kiln.stores import Store
from tests.stores.clock import Clock, clockable
from tests.stores.factories import (
    claim,
    complete,
    delete_row_only,
    insert,
    job,
    result,
    roll_all,
    state_of,
)


@pytest.fixture
def store_url(store_url: str) -> Iterator[str]:
    yield from clockable(store_url)


async def _finished(store: Store, outcome: Outcome) -> int:
    """A job of kind k that ran once and ended with ``outcome`` (or was cancelled)."""
    [dep] = await insert(store, job())
    if outcome is Outcome.CANCELLED:
        assert await store.jobs_cancel(JobFilter(ids=(dep,))) == 1
    else:
        [row] = await claim(store)
        await store.job_results_apply([result(row, outcome, error="boom")])
    return dep


async def test_pruning_a_cancelled_dependency_releases_its_dependents(
    store: Store, clock: Clock
) -> None:
    dep = await _finished(store, Outcome.CANCELLED)
    [c] = await insert(store, job(kind="c", depends_on=[dep]))
    [r] = await insert(store, job(kind="r", depends_on=[dep], rate_key="key"))
    assert await state_of(store, c) == "awaiting"
    await roll_all(store, clock)  # the rollup has counted them: they may go
    assert await store.jobs_prune(JobState.CANCELLED, 0.01, 10) == 1
    assert await state_of(store, dep) is None
    assert await state_of(store, c) == "available"
    assert await state_of(store, r) == "pending"  # its own options decide, as on delete
    assert await store.job_dependents(dep) == []


async def test_pruning_a_failed_dependency_waits_for_the_others(store: Store, clock: Clock) -> None:
    dep = await _finished(store, Outcome.FAILED)
    [other] = await insert(store, job(kind="o"))
    [c] = await insert(store, job(kind="c", depends_on=[dep, other]))
    await roll_all(store, clock)  # the rollup has counted them: they may go
    assert await store.jobs_prune(JobState.FAILED, 0.01, 10) == 1
    assert await state_of(store, c) == "awaiting"  # other is still to do
    [row] = await claim(store, kinds=("o",))
    await complete(store, row)
    assert await state_of(store, c) == "available"


async def test_pruning_completed_jobs_leaves_no_edges_behind(store: Store, clock: Clock) -> None:
    [a, b] = await insert(store, job(), job(kind="b"))
    [c] = await insert(store, job(kind="c", depends_on=[a, b]))
    [row] = await claim(store)
    await complete(store, row)
    await roll_all(store, clock)  # the rollup has counted them: they may go
    assert await store.jobs_prune(JobState.COMPLETED, 0.01, 10) == 1
    assert await store.job_dependents(a) == []
    assert await state_of(store, c) == "awaiting"  # b is still to do
    [row] = await claim(store, kinds=("b",))
    await complete(store, row)
    assert await state_of(store, c) == "available"


async def test_release_stranded_frees_dependents_of_missing_jobs(
    store: Store, store_url: str
) -> None:
    [gone, done, running] = await insert(store, job(), job(kind="d"), job(kind="r"))
    [row] = await claim(store, kinds=("d",))
    await complete(store, row)
    [free] = await insert(store, job(kind="c", queue="a", depends_on=[gone, done]))
    [held] = await insert(store, job(kind="c", queue="b", depends_on=[gone, running]))
    [later] = await insert(store, job(kind="c", queue="a", depends_on=[gone], delay=60))
    [keyed] = await insert(store, job(kind="c", queue="a", depends_on=[gone], rate_key="k"))
    delete_row_only(store_url, gone)
    assert await state_of(store, free) == "awaiting"  # stranded: nothing would free it
    assert await store.jobs_release_stranded(2) == {"a": 2}  # bounded by its limit
    assert await store.jobs_release_stranded(10) == {"a": 1}
    assert await store.jobs_release_stranded(10) == {}
    assert await state_of(store, free) == "available"
    assert await state_of(store, later) == "scheduled"
    assert await state_of(store, keyed) == "pending"
    assert await state_of(store, held) == "awaiting"  # still waits for `running`
    [row] = await claim(store, kinds=("r",))
    await complete(store, row)
    assert await state_of(store, held) == "available"


async def test_release_stranded_leaves_jobs_that_still_wait(store: Store) -> None:
    [a] = await insert(store, job())
    await insert(store, job(kind="c", depends_on=[a]))
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.FAILED, error="x")])
    assert await store.jobs_release_stranded(10) == {}  # failed is not completed


async def test_requeueing_an_awaiting_job_checks_its_dependencies_again(
    store: Store, store_url: str
) -> None:
    [gone, running] = await insert(store, job(), job(kind="r"))
    [stranded] = await insert(store, job(kind="c", depends_on=[gone]))
    [waiting] = await insert(store, job(kind="c", depends_on=[running]))
    delete_row_only(store_url, gone)
    assert await store.jobs_requeue(JobFilter(ids=(stranded, waiting))) == 2
    assert await state_of(store, stranded) == "available"
    assert await state_of(store, waiting) == "awaiting"  # `running` is not done yet
