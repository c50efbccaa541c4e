"""Conformance: the reads behind the dashboard's Kinds page and charts.

``job_counts_by_kind`` counts every job by kind and state (``job_kind_counts`` the
same, capped on PostgreSQL); ``job_finished_series`` puts finished jobs into buckets
on the epoch's minutes back from the database's now (bucket 0 the current one; the
rollup's side: tests/stores/test_conformance_finished_counts.py), and leaves out
what finished before the span or has not finished.
``queue_completed_series`` does the same for completed jobs, by queue, and
``queue_running_counts`` counts running jobs by queue and server (the queues page).
"""

from __future__ import annotations

from kiln._model._job import JobState, Outcome
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, result


async def test_counts_by_kind_and_state(store: Store) -> None:
    await insert(store, job("a"), job("a"), job("b"), job("c", delay=3600))
    [row] = await claim(store, limit=1, kinds=("b",))
    await store.job_results_apply([result(row)])
    counts = {(k, s): n for k, s, n in await store.job_counts_by_kind()}
    assert counts == {("a", JobState.AVAILABLE): 2, ("b", JobState.COMPLETED): 1,
                      ("c", JobState.SCHEDULED): 1}


async def test_kind_counts_are_exact_on_a_small_table_whatever_the_cap(store: Store) -> None:
    """``job_kind_counts`` (the Kinds page): exact and unmarked on a small table, over
    the cap or not (PostgreSQL's sample is then the whole table; MariaDB and SQLite
    count exactly). PostgreSQL's estimates: tests/stores/test_postgres_kind_count_plans.py."""
    await insert(store, job("a"), job("a"), job("a"), job("b"), job("c", delay=3600),
                 job("c", queue="other"))
    [row] = await claim(store, limit=1, kinds=("b",))
    await store.job_results_apply([result(row)])
    exact = {(k, s): n for k, s, n in await store.job_counts_by_kind()}
    for cap in (1, 2, 1000):
        got = await store.job_kind_counts(cap)
        assert not [c for c in got if c.estimated], cap
        assert {(c.kind, c.state): c.count for c in got} == exact, cap


async def test_finished_series_buckets_back_from_now(store: Store) -> None:
    await insert(store, *[job() for _ in range(5)], job(queue="other"))
    rows = await claim(store, limit=5)
    outcomes = [Outcome.COMPLETED] * 3 + [Outcome.FAILED] * 2
    await store.job_results_apply(
        [result(r, o, error="boom" if o is Outcome.FAILED else None)
         for r, o in zip(rows, outcomes, strict=True)]
    )
    series = await store.job_finished_series(3600.0, 60.0)
    assert sorted(series) == [(0, "completed", 3), (0, "failed", 2)]
    assert all(isinstance(b, int) for b, _s, _n in series)
    assert await store.job_finished_series(0.0, 60.0) == []  # a span that holds nothing



async def test_completed_series_by_queue(store: Store) -> None:
    await insert(store, *[job() for _ in range(4)], *[job(queue="other") for _ in range(2)])
    rows = await claim(store, limit=4)
    outcomes = [Outcome.COMPLETED] * 3 + [Outcome.FAILED]
    await store.job_results_apply(
        [result(r, o, error="boom" if o is Outcome.FAILED else None)
         for r, o in zip(rows, outcomes, strict=True)]
    )
    others = await claim(store, limit=2, queue="other")
    await store.job_results_apply([result(others[0])])  # the other stays running
    series = await store.queue_completed_series(3600.0, 60.0)
    assert sorted(series) == [("other", 0, 1), ("q", 0, 3)]  # failed ones are not counted
    assert all(isinstance(b, int) and isinstance(n, int) for _q, b, n in series)
    assert await store.queue_completed_series(0.0, 60.0) == []


async def test_running_counts_by_queue_and_server(store: Store) -> None:
    await insert(store, *[job() for _ in range(5)], job(queue="other"), job(queue="idle"))
    await claim(store, limit=2, server="s1")
    done = await claim(store, limit=2, server="s2")
    await claim(store, limit=1, queue="other", server="s2")
    await store.job_results_apply([result(done[0])])
    counts = sorted(await store.queue_running_counts())
    assert counts == [("other", "s2", 1), ("q", "s1", 2), ("q", "s2", 1)]

async def test_time_range_and_oldest_first_paging(store: Store) -> None:
    from datetime import timedelta

    from kiln._model._job import JobFilter

    ids = await insert(store, *[job() for _ in range(5)])
    now = await store.now()
    everything = JobFilter(created_after=now - timedelta(hours=1))
    assert [r.id for r in await store.job_list(everything, 10)] == sorted(ids, reverse=True)
    assert await store.job_list(JobFilter(created_after=now + timedelta(hours=1)), 10) == []
    assert await store.job_count(JobFilter(created_before=now - timedelta(hours=1))) == 0
    assert await store.job_count(JobFilter(created_before=now + timedelta(hours=1))) == 5
    first = await store.job_list(JobFilter(), 3, after_id=0)
    assert [r.id for r in first] == sorted(ids)[:3]
    rest = await store.job_list(JobFilter(), 3, after_id=first[-1].id)
    assert [r.id for r in rest] == sorted(ids)[3:]
    # bulk actions take the range too: nothing enqueued an hour from now is deleted
    assert await store.jobs_delete(JobFilter(created_after=now + timedelta(hours=1))) == 0
    assert await store.job_count(JobFilter()) == 5
