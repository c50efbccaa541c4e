"""Conformance: unique jobs (kiln.Unique) against each store's unique index.

A duplicate returns the holder's id and says it was not inserted, within one batch and
against the table; the key frees when the job leaves the states that count, and a
requeue puts a job back only while nobody else holds its key.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from kiln import EnqueueResult, JobFilter, JobState, KilnError, Outcome, RateLimit, Unique
from kiln._model._build import build_job
from kiln._model._job import NewJob
from kiln.stores import Store
from tests.stores.factories import claim, result, state_of
from tests.stores.rival import Rival

BY_TENANT = Unique(by=("args.tenant",))


def uniq(args: Any, unique: Unique = BY_TENANT, **options: Any) -> NewJob:
    return build_job("k", args, None, queue="q", unique=unique, **options)


def flags(results: list[int]) -> list[tuple[int, bool]]:
    assert all(isinstance(r, EnqueueResult) for r in results)
    return [(int(r), r.inserted) for r in results]  # type: ignore[attr-defined]


async def test_duplicates_in_a_batch_and_against_the_table(store: Store) -> None:
    plain = build_job("k", {"tenant": 1}, None, queue="q")
    first = await store.job_insert_many(
        [uniq({"tenant": 1, "n": 1}), plain, uniq({"tenant": 2}), uniq({"tenant": 1, "n": 2})]
    )
    a, b = int(first[0]), int(first[2])
    assert flags([first[0], first[2], first[3]]) == [(a, True), (b, True), (a, False)]
    assert not isinstance(first[1], EnqueueResult) or first[1].inserted
    again = await store.job_insert_many([uniq({"tenant": 2}), uniq({"tenant": 3})])
    assert flags(again)[0] == (b, False) and again[1].inserted  # type: ignore[attr-defined]
    assert await store.job_count(JobFilter()) == 4  # tenant 1, the plain job, tenants 2, 3


async def test_key_by_args_queue_or_given(store: Store) -> None:
    by_args = Unique()
    [x, y] = await store.job_insert_many([uniq({"a": 1}, by_args), uniq({"a": 2}, by_args)])
    assert x.inserted and y.inserted  # type: ignore[attr-defined]
    given = Unique(key="nightly-report")
    [p, q] = await store.job_insert_many([uniq({"a": 1}, given), uniq({"b": 2}, given)])
    assert flags([p, q]) == [(int(p), True), (int(p), False)]
    by_queue = Unique(by=("queue",))
    one = build_job("k", {}, None, queue="q1", unique=by_queue)
    two = build_job("k", {"other": 1}, None, queue="q2", unique=by_queue)
    assert all(r.inserted for r in await store.job_insert_many([one, two]))  # type: ignore[attr-defined]


async def test_a_completed_job_frees_its_key_unless_completed_counts(store: Store) -> None:
    keep = Unique(by=("args.tenant",), states=(*Unique().states, JobState.COMPLETED))
    [free_id, kept_id] = await store.job_insert_many(
        [uniq({"tenant": 1}), uniq({"tenant": 2}, keep)]
    )
    rows = await claim(store, kinds=("k",))
    assert {r.id for r in rows} == {int(free_id), int(kept_id)}
    await store.job_results_apply([result(r) for r in rows])
    [again_free] = await store.job_insert_many([uniq({"tenant": 1})])
    [again_kept] = await store.job_insert_many([uniq({"tenant": 2}, keep)])
    assert again_free.inserted and int(again_free) != int(free_id)  # type: ignore[attr-defined]
    assert flags([again_kept]) == [(int(kept_id), False)]


async def test_a_requeued_failed_job_keeps_its_key(store: Store) -> None:
    [job_id] = await store.job_insert_many([uniq({"tenant": 7}, max_attempts=1)])
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.FAILED, error="boom")])
    assert await store.jobs_requeue(JobFilter(ids=(int(job_id),))) == 1
    [dup] = await store.job_insert_many([uniq({"tenant": 7})])
    assert flags([dup]) == [(int(job_id), False)]  # the requeued job holds the key again


async def test_a_requeue_skips_a_job_whose_key_another_holds(store: Store) -> None:
    [old] = await store.job_insert_many([uniq({"tenant": 8}, max_attempts=1)])
    [row] = await claim(store)
    await store.job_results_apply([result(row, Outcome.FAILED, error="boom")])
    [new] = await store.job_insert_many([uniq({"tenant": 8})])  # failed frees the key
    assert new.inserted and int(new) != int(old)  # type: ignore[attr-defined]
    assert await store.jobs_requeue(JobFilter(states=(JobState.FAILED,))) == 0
    failed = await store.job_get(int(old))
    assert failed is not None and failed.state is JobState.FAILED


async def test_rate_limited_unique_jobs_wait_for_admission(store: Store) -> None:
    limited: dict[str, Any] = {"rate_key": "rk", "rate_limit": RateLimit(1, per=3600)}
    [a, b] = await store.job_insert_many(
        [uniq({"tenant": 1}, **limited), uniq({"tenant": 1}, **limited)]
    )
    assert flags([a, b]) == [(int(a), True), (int(a), False)]
    row = await store.job_get(int(a))
    assert row is not None and row.state is JobState.PENDING


async def test_a_period_buckets_by_the_database_clock(store: Store) -> None:
    hourly = Unique(by=("args.tenant",), period=timedelta(hours=1))
    [a, b] = [await store.job_insert_many([uniq({"tenant": 1}, hourly)]) for _ in range(2)]
    assert flags(a + b) == [(int(a[0]), True), (int(a[0]), False)]
    per_second = Unique(by=("args.tenant",), period=1)
    [first] = await store.job_insert_many([uniq({"tenant": 1}, per_second)])
    await asyncio.sleep(1.05)  # the next bucket
    [later] = await store.job_insert_many([uniq({"tenant": 1}, per_second)])
    assert first.inserted and later.inserted and int(later) != int(first)  # type: ignore[attr-defined]


async def test_a_batch_of_period_jobs_keys_them_as_a_job_enqueued_alone(store: Store) -> None:
    """A batch's period keys (its runs, on SQLite) are the ones a lone job's insert
    stores: duplicates of it, and within the batch, are found either way."""
    hourly = Unique(by=("args.tenant",), period=timedelta(hours=1))
    [alone] = await store.job_insert_many([uniq({"tenant": 1}, hourly)])
    batch = await store.job_insert_many([
        uniq({"tenant": 2}, hourly), uniq({"tenant": 1}, hourly),
        uniq({"tenant": 2, "n": 2}, hourly), uniq({"tenant": 3}),
    ])
    b, c = int(batch[0]), int(batch[3])
    assert flags(batch) == [(b, True), (int(alone), False), (b, False), (c, True)]
    again = await store.job_insert_many([uniq({"tenant": 3}), uniq({"tenant": 2}, hourly)])
    assert flags(again) == [(c, False), (b, False)]
    [lone] = await store.job_insert_many([uniq({"tenant": 2}, hourly)])
    assert flags([lone]) == [(b, False)]
    assert await store.job_count(JobFilter()) == 3


def test_bad_unique_input_is_refused_before_anything_is_written() -> None:
    with pytest.raises(KilnError, match=r"args have no top-level key 'tenant'"):
        uniq({"other": 1})
    with pytest.raises(KilnError, match=r"args have no top-level key 'tenant'"):
        uniq([1, 2])
    with pytest.raises(KilnError, match="must include every active state"):
        Unique(states=(JobState.AVAILABLE,))
    # running may be left out (Unique.WAITING), but then no finished state may count
    assert Unique(states=Unique.WAITING).mask == 1 | 2 | 4 | 8
    assert Unique.from_json(Unique(states=Unique.WAITING).to_json()).states == Unique.WAITING
    with pytest.raises(KilnError, match="without running cannot hold finished"):
        Unique(states=(*Unique.WAITING, JobState.COMPLETED))
    with pytest.raises(KilnError, match=r"unique\.by"):
        Unique(by=("metadata.x",))
    with pytest.raises(KilnError, match=r"unique\.period"):
        Unique(period=0.5)
    with pytest.raises(KilnError, match="cannot have depends_on"):
        uniq({"tenant": 1}, depends_on=[1])
    with pytest.raises(KilnError, match=r"kiln\.Unique"):
        build_job("k", {}, None, unique="yes")  # type: ignore[arg-type]


async def test_a_requeue_of_two_finished_jobs_of_one_key_puts_back_the_newest(
    store: Store,
) -> None:
    ids = []
    for _ in range(2):  # two failed jobs of one key: failed frees it for the second
        [job_id] = await store.job_insert_many([uniq({"tenant": 9}, max_attempts=1)])
        [row] = await claim(store)
        await store.job_results_apply([result(row, Outcome.FAILED, error="boom")])
        ids.append(int(job_id))
    assert await store.jobs_requeue(JobFilter(states=(JobState.FAILED,))) == 1
    old, new = [await store.job_get(i) for i in ids]
    assert old is not None and old.state is JobState.FAILED
    assert new is not None and new.state is JobState.AVAILABLE
    [dup] = await store.job_insert_many([uniq({"tenant": 9})])
    assert flags([dup]) == [(ids[1], False)]


async def test_each_result_is_its_own_jobs_id(store: Store) -> None:
    """All inserted or some skipped, the ids come back in the batch's order (stores
    place them by position when nothing was skipped, by key otherwise)."""
    plain = build_job("k", {"tenant": "plain"}, None, queue="q")
    [held] = await store.job_insert_many([uniq({"tenant": 5})])
    for batch in (
        [uniq({"tenant": n}) for n in range(20)],  # all new
        [uniq({"tenant": n}) for n in range(20, 30)] + [plain, uniq({"tenant": 5})],
    ):
        results = await store.job_insert_many(batch)
        assert len(results) == len(batch)
        for job, job_id in zip(batch, results, strict=True):
            row = await store.job_get(int(job_id))
            assert row is not None and row.args == job.args
    assert flags([results[-1]]) == [(int(held), False)]


async def test_a_requeue_racing_an_uncommitted_holder_leaves_that_job_and_moves_the_rest(
    store: Store, backend: str
) -> None:
    """A producer's transaction enqueues tenant 1 again and has not committed when a
    requeue of the cancelled tenants 1 and 2 starts: the requeue waits for it, then
    leaves tenant 1's old job where it is (its key is held) and requeues tenant 2. It
    failed whole on the unique index, with a raw duplicate-key error."""
    if backend == "sqlite":
        pytest.skip("sqlite: one writer, so the requeue starts after the producer's commit")
    old = [int(i) for i in await store.job_insert_many([uniq({"tenant": 1}), uniq({"tenant": 2})])]
    assert await store.jobs_cancel(JobFilter(ids=tuple(old))) == 2
    producer = Rival(store, backend)
    try:
        [again] = store.job_insert_many_sync([uniq({"tenant": 1})], producer.conn)
        requeue = asyncio.create_task(store.jobs_requeue(JobFilter(states=(JobState.CANCELLED,))))
        await producer.wait_for_a_waiter(requeue)
        producer.conn.commit()
        assert await asyncio.wait_for(requeue, 30) == 1
    finally:
        producer.close()
    states = {i: await state_of(store, i) for i in (*old, int(again))}
    assert states == {old[0]: "cancelled", old[1]: "available", int(again): "available"}
