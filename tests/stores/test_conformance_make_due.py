"""Conformance: jobs_make_due brings scheduled and pending jobs forward, nothing else."""

from __future__ import annotations

from kiln._model._job import JobFilter, JobState, Outcome, RateLimit
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result, state_of


async def test_make_due_releases_delayed_and_retried_jobs_keeping_their_attempts(
    store: Store,
) -> None:
    [delayed, other_kind, other_queue] = await insert(
        store, job(delay=600), job(kind="k2", delay=600), job(queue="q2", delay=600)
    )
    [retried] = await insert(store, job(args={"n": 2}))
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.RETRY, delay=600, error="boom")])
    assert (await store.jobs_release_due()).released == {}

    made = await store.jobs_make_due(JobFilter(kind="k", queue="q"))
    assert made == 2
    assert (await store.jobs_release_due()).released == {"q": 2}
    assert await state_of(store, delayed) == "available"
    after = await store.job_get(retried)
    assert after is not None and after.state is JobState.AVAILABLE
    assert after.attempt == 1 and [e.error for e in after.errors] == ["boom"]
    assert await state_of(store, other_kind) == "scheduled"
    assert await state_of(store, other_queue) == "scheduled"
    assert await store.jobs_make_due(JobFilter(kind="k", queue="q")) == 0  # nothing left


async def test_make_due_leaves_due_and_running_jobs_alone(store: Store) -> None:
    [running, available] = await insert(store, job(), job(kind="k2"))
    await claim(store, limit=1)
    assert await store.jobs_make_due(JobFilter()) == 0
    assert await state_of(store, running) == "running"
    assert await state_of(store, available) == "available"


async def test_make_due_lets_a_delayed_rate_limited_job_be_admitted(store: Store) -> None:
    await store.rate_limit_declare("r", RateLimit(rate=10, per=60))
    [pending] = await insert(store, job(rate_key="r", delay=600))
    assert await store.rate_keys_pending() == []
    assert await store.jobs_make_due(JobFilter(states=(JobState.PENDING,))) == 1
    assert await store.rate_keys_pending() == ["r"]
    admitted = await store.jobs_admit("r", 10)
    assert [a.job_id for a in admitted.admitted] == [pending]
