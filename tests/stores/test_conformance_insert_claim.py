"""Conformance: inserting jobs and claiming them."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from kiln._model._job import JobFilter, JobState, NewJob
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, state_of


async def test_insert_returns_ids_in_order_and_stores_every_field(store: Store) -> None:
    jobs = [
        job(args={"i": i}, priority=i % 3, max_attempts=7, timeout=12.5,
            backoff={"type": "constant", "seconds": 3}, metadata={"trace": "x"})
        for i in range(25)
    ]
    ids = await store.job_insert_many(jobs)
    assert len(ids) == 25 and ids == sorted(ids) and len(set(ids)) == 25
    row = await store.job_get(ids[4])
    assert row is not None
    assert (row.kind, row.queue, row.args, row.priority) == ("k", "q", {"i": 4}, 1)
    assert (row.max_attempts, row.timeout, row.attempt) == (7, 12.5, 0)
    assert row.backoff == {"type": "constant", "seconds": 3}
    assert row.metadata == {"trace": "x"} and row.params == {} and row.errors == []
    assert row.state is JobState.AVAILABLE and row.server_id is None
    assert row.created_at.tzinfo is not None and row.run_at.tzinfo is not None


async def test_insert_empty_batch(store: Store) -> None:
    assert await store.job_insert_many([]) == []


async def test_insert_unicode_and_nested_args_round_trip(store: Store) -> None:
    args = {"name": "Zoë ☃", "nested": [1, {"a": None, "b": [True, 2.5]}], "quote": "it's \"x\""}
    [job_id] = await insert(store, job(args=args))
    row = await store.job_get(job_id)
    assert row is not None and row.args == args


# JSON values that look like the empty ones, or are plain strings: PostgreSQL once read
# '"{}"' back as {} and failed on '"hello"' outside the claim (its driver decoded jsonb
# and the row decoder decoded again)
AMBIGUOUS_ARGS: list[Any] = ["hello", "{}", "[]", "null", "", 5, 2.5, True, None, [], {}]


async def test_args_of_every_json_type_round_trip_on_every_read(store: Store) -> None:
    ids = await store.job_insert_many([job(args=a, metadata={"m": "{}"}) for a in AMBIGUOUS_ARGS])
    for job_id, args in zip(ids, AMBIGUOUS_ARGS, strict=True):
        row = await store.job_get(job_id)
        assert row is not None and row.args == args and type(row.args) is type(args), (args, row)
        assert row.metadata == {"m": "{}"}
    listed = {r.id: r.args for r in await store.job_list(JobFilter(), limit=50)}
    assert [listed[i] for i in ids] == AMBIGUOUS_ARGS
    claimed = {r.id: r.args for r in await claim(store, limit=50)}
    assert [claimed[i] for i in ids] == AMBIGUOUS_ARGS


async def test_first_state_from_options(store: Store) -> None:
    now = await store.now()
    ids = await insert(
        store, job(), job(delay=60), job(run_at=now + timedelta(hours=1)),
        job(run_at=now - timedelta(hours=1)), job(rate_key="r"),
    )
    states = [await state_of(store, i) for i in ids]
    assert states == ["available", "scheduled", "scheduled", "available", "pending"]


async def test_sync_insert(store: Store) -> None:
    ids = await asyncio.to_thread(store.job_insert_many_sync, [job(), job(queue="other")])
    assert len(ids) == 2
    assert [await state_of(store, i) for i in ids] == ["available", "available"]


async def test_get_missing_job(store: Store) -> None:
    assert await store.job_get(987654321) is None


async def test_claim_marks_running_with_server_and_attempt(store: Store) -> None:
    [job_id] = await insert(store, job())
    [row] = await claim(store, server="srv-a")
    assert row.id == job_id and row.state is JobState.RUNNING
    assert row.server_id == "srv-a" and row.attempt == 1 and row.attempted_at is not None
    assert await claim(store) == []


async def test_claim_filters_by_queue_and_kind(store: Store) -> None:
    await insert(store, job(kind="a", queue="q1"), job(kind="b", queue="q1"),
                 job(kind="a", queue="q2"))
    rows = await store.job_claim("q1", ["a"], 10, "s1")
    assert [(r.kind, r.queue) for r in rows] == [("a", "q1")]
    assert await store.job_claim("q1", [], 10, "s1") == []
    assert await store.job_claim("nope", ["a", "b"], 10, "s1") == []
    rows = await store.job_claim("q1", ["a", "b"], 10, "s1")
    assert [(r.kind, r.queue) for r in rows] == [("b", "q1")]


async def test_claim_orders_by_priority_then_run_at_then_id(store: Store) -> None:
    now = await store.now()
    ids = await insert(
        store,
        job(priority=5),
        job(priority=1, run_at=now - timedelta(seconds=5)),
        job(priority=1, run_at=now - timedelta(seconds=10)),
        job(priority=0),
        job(priority=1, run_at=now - timedelta(seconds=10)),
    )
    rows = await claim(store, limit=10)
    assert [r.id for r in rows] == [ids[3], ids[2], ids[4], ids[1], ids[0]]


async def test_claim_respects_the_batch_limit(store: Store) -> None:
    await store.job_insert_many([job() for _ in range(7)])
    assert len(await claim(store, limit=3)) == 3
    assert len(await claim(store, limit=0)) == 0
    assert len(await claim(store, limit=10)) == 4


async def test_claim_skips_scheduled_pending_and_awaiting(store: Store) -> None:
    [dep] = await insert(store, job(kind="dep"))
    await insert(store, job(delay=60), job(rate_key="r"), job(depends_on=[dep]))
    assert await claim(store) == []


async def test_concurrent_claimers_never_get_the_same_job(store: Store, other_store: Store) -> None:
    ids = await store.job_insert_many([job() for _ in range(60)])

    async def drain(s: Store, name: str) -> list[int]:
        got: list[int] = []
        while True:
            rows = await s.job_claim("q", ["k"], 4, name)
            if not rows:
                return got
            got.extend(r.id for r in rows)

    results = await asyncio.gather(
        drain(store, "a"), drain(other_store, "b"), drain(store, "c"), drain(other_store, "d")
    )
    claimed = [i for part in results for i in part]
    assert sorted(claimed) == sorted(ids)  # every job once, none twice


async def test_insert_of_many_jobs(store: Store) -> None:
    jobs = [NewJob(kind="k", args={"i": i}, queue=f"q{i % 3}") for i in range(2_000)]
    ids = await store.job_insert_many(jobs)
    assert len(set(ids)) == 2_000
    counts = {(c.queue, c.state): c.count for c in await store.job_counts()}
    assert counts == {(f"q{i}", JobState.AVAILABLE): n for i, n in enumerate((667, 667, 666))}


async def test_mixed_batch_keeps_input_order(store: Store) -> None:
    from kiln._model._job import RateLimit

    [dep] = await insert(store, job(kind="dep"))
    batch = [job(args={"i": 0}), job(args={"i": 1}, depends_on=[dep]),
             job(args={"i": 2}, rate_key="r", rate_limit=RateLimit(rate=1)),
             job(args={"i": 3}, delay=30), job(args={"i": 4}, queue="other", priority=-1)]
    ids = await store.job_insert_many(batch)
    rows = [await store.job_get(i) for i in ids]
    assert [r.args["i"] for r in rows if r is not None] == [0, 1, 2, 3, 4]
    assert [r.state.value for r in rows if r is not None] == [
        "available", "awaiting", "pending", "scheduled", "available"]


async def test_naive_run_at_is_utc(store: Store) -> None:
    now = await store.now()
    naive = (now + timedelta(hours=2)).replace(tzinfo=None) - (now.utcoffset() or timedelta())
    [job_id] = await insert(store, job(run_at=naive))
    row = await store.job_get(job_id)
    assert row is not None and abs((row.run_at - now).total_seconds() - 7200) < 5


async def test_now_is_the_database_clock(store: Store) -> None:
    from datetime import UTC, datetime

    now = await store.now()
    assert now.tzinfo is not None and abs((now - datetime.now(UTC)).total_seconds()) < 5


async def test_batch_in_runs_gives_each_id_its_own_job(store: Store) -> None:
    """Runs of jobs that share every column but their args, broken by a job that
    differs in one column: every id gets its own job's args and columns, in order."""
    values: list[Any] = ["text", "{}", ["text"], {"s": 'a "quoted" \\ back\nslash\t\x01'},
                         ["Zoë ☃ \u2028"],
                         7, 2**70, 1.5e-7, None, True, False, [], {}, [1, [2, {"x": None}]],
                         {"é": {"ü": [0.1]}}]
    batch = [job(args={"i": i}) for i in range(150)]
    batch += [job(args=value) for value in values]
    batch += [job(kind="other", args={"i": 150}), job(args={"i": 151}, metadata={"m": 1})]
    batch += [job(args={"i": i}, priority=2) for i in range(152, 160)]
    batch += [job(args={"i": 160}, delay=30), job(args={"i": 161}, tags=("t1", "t2")),
              job(args={"i": 162}, queue="q2", max_attempts=3, timeout=4.0)]
    ids = await store.job_insert_many(batch)
    assert len(ids) == len(batch) and ids == sorted(set(ids))
    rows = [await store.job_get(i) for i in ids]
    assert [r.args if r else "missing" for r in rows] == [j.args for j in batch]
    seen = [(r.kind, r.queue, r.metadata, r.priority, r.state.value, r.tags, r.max_attempts,
             r.timeout) for r in rows if r is not None]
    assert seen == [(j.kind, j.queue, j.metadata, j.priority,
                     "scheduled" if j.delay else "available", list(j.tags), j.max_attempts,
                     j.timeout) for j in batch]
