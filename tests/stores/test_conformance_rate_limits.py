"""Conformance: rate-limit declaration and admission."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from kiln._model._job import JobState, RateLimit
from kiln.stores import Store
from tests.stores.factories import claim, insert, job, state_of


async def test_declare_and_list(store: Store) -> None:
    await store.rate_limit_declare("r", RateLimit(rate=5, per=2.0, burst=1))
    await store.rate_limit_declare("r", RateLimit(rate=5, per=2.0, burst=1))
    await insert(store, job(rate_key="r"), job(rate_key="r"))
    assert await store.rate_limit_list() == [("r", RateLimit(rate=5, per=2.0, burst=1), 2)]
    await store.rate_limit_declare("r", RateLimit(rate=7, per=1.0))
    assert await store.rate_limit_list() == [("r", RateLimit(rate=7, per=1.0, burst=0), 2)]


async def test_insert_declares_the_limit_it_carries(store: Store) -> None:
    await insert(store, job(rate_key="x", rate_limit=RateLimit(rate=3)))
    assert await store.rate_limit_list() == [("x", RateLimit(rate=3), 1)]


async def test_admit_makes_pending_jobs_claimable(store: Store) -> None:
    limit = RateLimit(rate=10, per=1.0, burst=3)
    ids = await insert(store, *(job(rate_key="r", rate_limit=limit) for _ in range(5)))
    assert await store.rate_keys_pending() == ["r"]
    assert await claim(store) == []
    res = await store.jobs_admit("r", 100)
    assert [a.job_id for a in res.admitted] == ids[:3]  # the bucket holds the burst
    assert all(a.queue == "q" and a.kind == "k" and a.delay >= 0 for a in res.admitted)
    assert res.next_at is not None and 0 < res.next_at <= 0.2
    assert [await state_of(store, i) for i in ids] == ["available"] * 3 + ["pending"] * 2
    row = await store.job_get(ids[0])
    assert row is not None and row.admitted_at is not None
    assert len(await claim(store)) == 3


async def test_admit_for_no_startable_queue_admits_nothing(store: Store) -> None:
    """Every queue paused or unserved: the admitter passes an empty list of queues, which
    admits nothing (SQLite once answered "no query solution": an empty IN list and its
    INDEXED BY; the user trial's pause repro logged it every round)."""
    limit = RateLimit(rate=10, per=1.0, burst=3)
    ids = await insert(store, *(job(rate_key="r", rate_limit=limit) for _ in range(2)))
    res = await store.jobs_admit("r", 100, [])
    assert res.admitted == [] and res.declared
    assert [await state_of(store, i) for i in ids] == ["pending"] * 2
    assert [a.job_id for a in (await store.jobs_admit("r", 100, ["q"])).admitted] == ids


async def test_admit_without_a_declared_limit_or_pending_jobs(store: Store) -> None:
    res = await store.jobs_admit("unknown", 10)
    assert res.admitted == [] and res.next_at is None and not res.declared
    await insert(store, job(rate_key="unknown"))  # pending jobs change nothing
    assert not (await store.jobs_admit("unknown", 10)).declared
    await store.rate_limit_declare("r", RateLimit(rate=1))
    res = await store.jobs_admit("r", 10)
    assert res.admitted == [] and res.next_at is None and res.declared


async def test_pending_job_with_a_delay_waits_for_its_run_at(store: Store) -> None:
    await insert(store, job(rate_key="r", rate_limit=RateLimit(rate=100), delay=60))
    assert await store.rate_keys_pending() == []
    assert (await store.jobs_admit("r", 10)).admitted == []


def _max_in_window(times: list[datetime], per: float) -> int:
    worst = 0
    for end in times:
        worst = max(worst, sum(1 for t in times if 0 <= (end - t).total_seconds() < per))
    return worst


async def test_no_window_admits_more_than_rate_plus_burst(store: Store, other_store: Store) -> None:
    limit = RateLimit(rate=4, per=0.4, burst=2)
    ids = await store.job_insert_many([job(rate_key="r", rate_limit=limit) for _ in range(40)])

    async def admitter(s: Store) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.3
        while loop.time() < deadline:
            await s.jobs_admit("r", 50)
            await asyncio.sleep(0.01)

    await asyncio.gather(admitter(store), admitter(other_store), admitter(store))
    rows = [await store.job_get(i) for i in ids]
    times = sorted(r.admitted_at for r in rows if r is not None and r.admitted_at is not None)
    assert len(times) >= 8  # admission kept going
    assert _max_in_window(times, limit.per) <= limit.rate + limit.burst
    pending = [r for r in rows if r is not None and r.state is JobState.PENDING]
    assert len(pending) == 40 - len(times)


async def test_backlog_lists_the_keys_most_behind_first(store: Store) -> None:
    """rate_keys_backlog: the keys with the most due pending jobs, most first, with their
    limit (None: undeclared); jobs not due yet, and other states, are not counted."""
    limit = RateLimit(rate=5, per=1.0)
    later = datetime.now(UTC) + timedelta(hours=1)
    await insert(store, *(job(rate_key="big", rate_limit=limit) for _ in range(4)),
                 *(job(rate_key="small", rate_limit=RateLimit(rate=2)) for _ in range(2)),
                 job(rate_key="nolimit"),
                 *(job(rate_key="later", rate_limit=limit, run_at=later) for _ in range(9)))
    assert await store.rate_keys_backlog(10) == [
        ("big", limit, 4), ("small", RateLimit(rate=2), 2), ("nolimit", None, 1)]
    assert await store.rate_keys_backlog(2) == [("big", limit, 4), ("small", RateLimit(rate=2), 2)]
    # capped (kilnotel's read): the same while every key is within the cap
    assert await store.rate_keys_backlog(10, cap=100) == [
        ("big", limit, 4), ("small", RateLimit(rate=2), 2), ("nolimit", None, 1)]
    assert await store.rate_keys_backlog(1, cap=100) == [("big", limit, 4)]
    # past the cap: estimated, here from a sample that reads the whole small table
    # (PostgreSQL's pages, MariaDB's and SQLite's ids): exact again
    for cap in (1, 3):
        assert await store.rate_keys_backlog(10, cap=cap) == [
            ("big", limit, 4), ("small", RateLimit(rate=2), 2), ("nolimit", None, 1)], cap
    await store.jobs_admit("big", 100)  # the bucket holds one: three left pending
    assert (await store.rate_keys_backlog(1)) == [("big", limit, 3)]
