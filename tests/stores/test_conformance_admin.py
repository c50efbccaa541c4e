"""Conformance: listing, counting and the bulk admin operations."""

from __future__ import annotations

from datetime import timedelta

from kiln._model._job import JobFilter, JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, complete, insert, job, result, state_of


async def _mixed(store: Store) -> dict[str, int]:
    """One job in each of available, running, completed, failed, scheduled, pending."""
    ids = await insert(store, job(args={"n": 1}), job(args={"n": 2}), job(args={"n": 3}))
    rows = await claim(store, limit=3)
    await complete(store, rows[0])
    await store.job_results_apply([result(rows[1], Outcome.FAILED, error="Kaboom here")])
    [available] = await insert(store, job(queue="q2"))
    [scheduled] = await insert(store, job(delay=60))
    [pending] = await insert(store, job(rate_key="r"))
    return {"completed": rows[0].id, "failed": rows[1].id, "running": rows[2].id,
            "available": available, "scheduled": scheduled, "pending": pending,
            "first": ids[0]}


async def test_list_and_count_filters(store: Store) -> None:
    ids = await _mixed(store)
    everything = await store.job_list(JobFilter(), limit=50)
    assert [r.id for r in everything] == sorted((r.id for r in everything), reverse=True)
    assert len(everything) == 6 and await store.job_count(JobFilter()) == 6
    failed = await store.job_list(JobFilter(states=(JobState.FAILED,)))
    assert [r.id for r in failed] == [ids["failed"]]
    assert await store.job_count(JobFilter(queue="q2")) == 1
    assert await store.job_count(JobFilter(kind="k", states=(JobState.RUNNING,))) == 1
    assert await store.job_count(JobFilter(kind="nope")) == 0
    by_error = await store.job_list(JobFilter(error="kaboom"))
    assert [r.id for r in by_error] == [ids["failed"]]
    assert await store.job_count(JobFilter(error="100%_")) == 0
    some = (ids["failed"], ids["pending"])
    assert sorted(r.id for r in await store.job_list(JobFilter(ids=some))) == sorted(some)


async def test_list_pages_by_id(store: Store) -> None:
    ids = await store.job_insert_many([job() for _ in range(7)])
    page1 = await store.job_list(JobFilter(), limit=3)
    page2 = await store.job_list(JobFilter(), limit=3, before_id=page1[-1].id)
    page3 = await store.job_list(JobFilter(), limit=3, before_id=page2[-1].id)
    seen = [r.id for r in page1 + page2 + page3]
    assert seen == sorted(ids, reverse=True)


async def test_requeue_resets_attempts_and_counts(store: Store) -> None:
    ids = await _mixed(store)
    n = await store.jobs_requeue(JobFilter(states=(JobState.FAILED, JobState.RUNNING)))
    assert n == 1  # a running job is not requeued
    again = await store.job_get(ids["failed"])
    assert again is not None and again.state is JobState.AVAILABLE
    assert again.attempt == 0 and again.finished_at is None and again.server_id is None
    assert [e.error for e in again.errors] == ["Kaboom here"]  # history is kept
    assert await state_of(store, ids["running"]) == "running"
    assert await store.jobs_requeue(JobFilter(ids=(ids["completed"],))) == 1
    assert await state_of(store, ids["completed"]) == "available"
    assert await store.jobs_requeue(JobFilter(ids=(ids["scheduled"],))) == 1
    assert await state_of(store, ids["scheduled"]) == "available"


async def test_requeue_of_rate_limited_job_goes_pending(store: Store) -> None:
    [job_id] = await insert(store, job(rate_key="r"))
    assert await store.jobs_cancel(JobFilter(ids=(job_id,))) == 1
    assert await store.jobs_requeue(JobFilter(ids=(job_id,))) == 1
    assert await state_of(store, job_id) == "pending"


async def test_cancel_counts_and_fences_running_jobs(store: Store) -> None:
    ids = await _mixed(store)
    running = await store.job_get(ids["running"])
    assert running is not None
    n = await store.jobs_cancel(JobFilter())
    assert n == 4  # running, available, scheduled, pending; not completed or failed
    assert await state_of(store, ids["completed"]) == "completed"
    assert await state_of(store, ids["running"]) == "cancelled"
    late = await store.job_results_apply([result(running)])
    assert late.applied == 0
    assert await store.jobs_cancel(JobFilter()) == 0


async def test_delete_counts_and_never_deletes_running(store: Store) -> None:
    ids = await _mixed(store)
    assert await store.jobs_delete(JobFilter(states=(JobState.FAILED,))) == 1
    assert await store.job_get(ids["failed"]) is None
    assert await store.jobs_delete(JobFilter()) == 4
    assert await state_of(store, ids["running"]) == "running"
    assert await store.jobs_delete(JobFilter()) == 0


async def test_counts_by_queue_and_state(store: Store) -> None:
    await _mixed(store)
    counts = {(c.queue, c.state): c.count for c in await store.job_counts()}
    assert counts == {
        ("q", JobState.COMPLETED): 1, ("q", JobState.FAILED): 1, ("q", JobState.RUNNING): 1,
        ("q2", JobState.AVAILABLE): 1, ("q", JobState.SCHEDULED): 1, ("q", JobState.PENDING): 1,
    }


async def test_counts_of_some_states_only(store: Store) -> None:
    """The live states alone (what kilnotel counts every counts_ttl), and each other
    subset, agree with the full counts; none asked for is none counted."""
    await _mixed(store)
    everything = {(c.queue, c.state): c.count for c in await store.job_counts()}
    live = (JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
            JobState.RUNNING, JobState.FAILED)
    for states in (live, (JobState.COMPLETED, JobState.CANCELLED), (JobState.AVAILABLE,),
                   (JobState.RUNNING,)):
        some = {(c.queue, c.state): c.count for c in await store.job_counts(states)}
        assert some == {k: v for k, v in everything.items() if k[1] in states}, states
    assert await store.job_counts(()) == []


async def test_oldest_available_per_queue(store: Store) -> None:
    assert await store.queue_oldest_available() == {}
    now = await store.now()
    await insert(store, job(run_at=now - timedelta(seconds=30)), job(queue="b"))
    oldest = await store.queue_oldest_available()
    assert set(oldest) == {"q", "b"}
    assert 29.0 <= oldest["q"] < 40.0 and 0.0 <= oldest["b"] < 5.0


async def test_throughput_counts_recent_finishes_by_state(store: Store) -> None:
    await _mixed(store)
    assert await store.job_throughput(60) == {"completed": 1, "failed": 1}


async def test_capped_counts_are_exact_on_a_small_table(store: Store) -> None:
    """``job_counts(cap=...)`` (what the dashboard and kilnotel read): every store gives
    the exact counts when the table is small, over the cap or not (PostgreSQL's sample
    is then the whole table; MariaDB and SQLite always count exactly), none marked
    estimated. PostgreSQL's estimates: tests/stores/test_postgres_count_plans.py."""
    await _mixed(store)
    await insert(store, *(job(queue="q2") for _ in range(3)))
    everything = {(c.queue, c.state): c.count for c in await store.job_counts()}
    assert everything[("q2", JobState.AVAILABLE)] == 4
    for cap in (1, 3, 1000):
        for states in (None, (JobState.AVAILABLE, JobState.FAILED), ()):
            capped = await store.job_counts(states, cap=cap)
            assert not [c for c in capped if c.estimated], (cap, states)
            assert {(c.queue, c.state): c.count for c in capped} == {
                k: v for k, v in everything.items() if states is None or k[1] in states}
        assert await store.jobs_available_by_kind(cap) == await store.jobs_available_by_kind()
