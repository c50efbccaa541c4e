"""Conformance: admitting ahead, and several keys in one call (issue 40, item 1).

A round with ``ahead`` gives each job the time its key's bucket allows it, up to
``ahead`` from now: the first ones now (``available``), the others ``scheduled`` at
their time, ``per / rate`` apart (rounded up to the microsecond, plus one); the next
round goes on from the last time given. ``jobs_admit_keys`` does this for several
keys in one transaction and skips a key whose row another transaction holds.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from kiln._model._job import JobState, RateLimit
from kiln.stores import Store
from tests.stores.factories import insert, job, state_of
from tests.stores.rival import Rival

LIMIT = RateLimit(rate=100, per=1.0)  # one every 10 ms, burst 0: the bucket holds one


async def _admitted_at(store: Store, ids: list[int]) -> list[float]:
    out = []
    for job_id in ids:
        row = await store.job_get(job_id)
        assert row is not None and row.admitted_at is not None and row.run_at is not None
        assert row.run_at == row.admitted_at
        out.append(row.admitted_at.timestamp())
    return out


async def test_a_round_admits_ahead_at_the_buckets_times(store: Store) -> None:
    ids = await insert(store, *(job(rate_key="r", rate_limit=LIMIT, args={"n": n})
                                for n in range(50)))
    first = await store.jobs_admit("r", 1000, ahead=0.1)
    # the token the bucket holds, then one every 10 ms while less than 0.1 s ahead
    assert len(first.admitted) == 10, len(first.admitted)
    admitted = [a.job_id for a in first.admitted]
    assert admitted == ids[:10]
    states = [await state_of(store, i) for i in ids[:11]]
    assert states[0] in ("available", "scheduled") and states[10] == "pending"
    assert states[2:10] == ["scheduled"] * 8
    times = await _admitted_at(store, admitted)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 10 ms and a hundredth of a microsecond, rounded up: 10.000 or 10.001 ms
    assert all(0.01 - 2e-6 <= g < 0.0105 for g in gaps[1:]), gaps
    assert times[9] - times[1] >= 0.08 - 1e-6, times
    # the next round goes on after the last time given: never closer than per / rate
    assert first.next_at is not None and first.next_at <= 0.06
    second = await store.jobs_admit("r", 1000, ahead=0.1)
    more = await _admitted_at(store, [a.job_id for a in second.admitted])
    assert more and more[0] - times[-1] >= 0.01, (more[0] - times[-1])
    # without ahead nothing is admitted before the bucket's last time (nothing at all
    # unless the machine took longer than that to get here)
    third = await store.jobs_admit("r", 1000)
    late = await _admitted_at(store, [a.job_id for a in third.admitted])
    assert all(t - more[-1] >= 0.01 - 1e-6 for t in late), (late, more[-1])


async def test_admitted_ahead_jobs_become_available_at_their_time(store: Store) -> None:
    ids = await insert(store, *(job(rate_key="r", rate_limit=LIMIT, args={"n": n})
                                for n in range(5)))
    res = await store.jobs_admit("r", 1000, ahead=0.1)
    assert len(res.admitted) == 5
    await asyncio.sleep(0.1)
    await store.jobs_release_due()
    assert [await state_of(store, i) for i in ids] == [JobState.AVAILABLE.value] * 5


async def test_several_keys_in_one_call(store: Store) -> None:
    keys = [f"t{n}" for n in range(5)]
    for key in keys:
        await insert(store, *(job(rate_key=key, rate_limit=LIMIT, args={"n": n})
                              for n in range(20)))
    await insert(store, job(rate_key="nobody"))  # no limit declared
    results = await store.jobs_admit_keys([*keys, "nobody"], 1000, ahead=0.05)
    assert set(results) == {*keys, "nobody"}
    assert not results["nobody"].declared and results["nobody"].admitted == []
    for key in keys:
        assert 4 <= len(results[key].admitted) <= 5, (key, len(results[key].admitted))
        assert results[key].next_at is not None and not results[key].busy
    assert (await store.jobs_admit_keys(["t0"], 1000, queues=["elsewhere"])).keys() == {"t0"}


async def test_a_key_another_transaction_holds_is_skipped(store: Store, backend: str) -> None:
    """A producer's open transaction declared key a's limit (its row is locked): the
    call skips a at once (busy) and admits b."""
    if backend == "sqlite":
        pytest.skip("sqlite: one writer, so no other transaction holds a key's row")
    for key in ("a", "b"):
        await insert(store, *(job(rate_key=key, rate_limit=LIMIT) for _ in range(3)))
    producer = Rival(store, backend)
    try:
        store.job_insert_many_sync([job(rate_key="a", rate_limit=LIMIT)], producer.conn)
        results = await asyncio.wait_for(store.jobs_admit_keys(["a", "b"], 10), 10)
        assert results["a"].busy and results["a"].admitted == []
        assert len(results["b"].admitted) == 1 and not results["b"].busy
    finally:
        producer.conn.rollback()
        producer.close()
