"""Conformance: one enqueue call is one transaction, on every store.

A batch that mixes plain and unique jobs (or whose jobs depend on earlier ones of the
batch) is written all or none; a deadlock's retry writes each job once; two producers
whose batches share unique keys in opposite orders store every plain job once and
agree on every key. The caller's-connection cases are in test_insert_joined.py.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

from kiln import EnqueueResult, JobFilter, KilnError, Unique
from kiln._model._build import build_job
from kiln._model._job import NewJob
from kiln.stores import Store, store_from_url
from tests.stores.factories import job
from tests.stores.rival import Rival

BY_TENANT = Unique(by=("args.tenant",))


def uniq(tenant: Any, **options: Any) -> NewJob:
    return build_job("k", {"tenant": tenant}, None, queue="q", unique=BY_TENANT, **options)


def unwritable(**options: Any) -> NewJob:
    """A job every store refuses at the statement (no queue: NOT NULL), after build_job's
    checks, so the store's own all-or-none is what is tested."""
    bad = NewJob(kind="k", args={"tenant": "bad"}, queue=None, **options)  # type: ignore[arg-type]
    return bad


def unwritable_unique() -> NewJob:
    bad = uniq("bad")
    bad.queue = None  # type: ignore[assignment]
    return bad


async def insert(store: Store, jobs: list[NewJob], sync: bool) -> list[int]:
    if sync:
        return await asyncio.to_thread(store.job_insert_many_sync, jobs)
    return await store.job_insert_many(jobs)


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_mixed_batch_whose_unique_part_fails_writes_nothing(
    store: Store, sync: bool
) -> None:
    batch = [job(kind="p"), job(kind="p"), uniq(1), unwritable_unique()]
    with pytest.raises(KilnError):
        await insert(store, batch, sync)
    assert await store.job_count(JobFilter()) == 0  # the plain jobs went with it
    ids = await insert(store, batch[:3], sync)  # and the same jobs insert afterwards
    assert await store.job_count(JobFilter()) == 3 and ids[2].inserted  # type: ignore[attr-defined]


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_jobs_after_earlier_jobs_of_the_batch_are_written_all_or_none(
    store: Store, sync: bool
) -> None:
    first = uniq(1)
    chain = [first, job(after=(0,)), job(after=(1,)), job(after=(0, 2))]
    ids = await insert(store, chain, sync)
    for position, deps in ((1, [0]), (2, [1]), (3, [0, 2])):
        row = await store.job_get(int(ids[position]))
        assert row is not None and sorted(row.depends_on) == sorted(int(ids[d]) for d in deps)
        assert row.state.value == "awaiting"
    again = await insert(store, [uniq(1), job(after=(0,))], sync)  # a duplicate's holder
    assert not again[0].inserted  # type: ignore[attr-defined]
    row = await store.job_get(int(again[1]))
    assert row is not None and list(row.depends_on) == [int(ids[0])]
    before = await store.job_count(JobFilter())
    with pytest.raises(KilnError):  # the last level fails: the first levels go with it
        await insert(store, [uniq(2), job(after=(0,)), unwritable(after=(1,))], sync)
    assert await store.job_count(JobFilter()) == before


def test_a_job_may_come_only_after_earlier_jobs_of_its_batch() -> None:
    from kiln.stores._rows import levels

    assert levels([job(), job(after=(0,)), job(), job(after=(1, 2))]) == [[0, 2], [1], [3]]
    with pytest.raises(ValueError, match="earlier jobs only"):
        levels([job(after=(1,)), job()])


ROUNDS, KEYS = 6, 400


async def test_two_producers_with_shared_keys_in_opposite_orders(
    store: Store, other_store: Store
) -> None:
    """Each round, two producers insert [1 plain + 400 unique] at once, the unique keys
    the same and in opposite orders: no deadlock, no error, each plain job stored once
    (a deadlock's retry stored them twice or three times), one job per key."""
    for r in range(ROUNDS):
        keys = [f"{r}-{k}" for k in range(KEYS)]
        one = [job(kind="p", args={"round": r, "producer": 1}), *map(uniq, keys)]
        two = [job(kind="p", args={"round": r, "producer": 2}),
               *map(uniq, reversed(keys))]
        got_one, got_two = await asyncio.gather(
            store.job_insert_many(one), other_store.job_insert_many(two)
        )
        mine = list(zip(got_one[1:], reversed(got_two[1:]), strict=True))
        assert all(int(a) == int(b) for a, b in mine)  # both see the key's one job
        assert all(_inserted(a) != _inserted(b) for a, b in mine)  # exactly one inserted it
    assert await store.job_count(JobFilter(kind="p")) == 2 * ROUNDS
    assert await store.job_count(JobFilter(kind="k")) == ROUNDS * KEYS


def _inserted(result: int) -> bool:
    assert isinstance(result, EnqueueResult)
    return result.inserted


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_deadlock_retried_mixed_batch_inserts_its_plain_jobs_once(
    store: Store, backend: str, sync: bool
) -> None:
    """A rival transaction holds the batch's second unique key, waits for the batch to
    block on it, then takes the first: a deadlock whose victim is the batch (the rival's
    insert returns, so it was not). The store runs the batch again: its plain job is
    stored once (its first run committed it on its own, and the retry a second time).
    The sync path (the store's own sync connection) retries the same way."""
    if backend == "sqlite":
        pytest.skip("sqlite: one writer at a time, so no deadlock to retry")
    first, second = sorted([uniq("a"), uniq("b")], key=lambda j: j.unique_key or "")
    rival = Rival(store, backend)
    try:
        rival.heavier(store)
        await asyncio.to_thread(store.job_insert_many_sync, [second], rival.conn)
        batch = asyncio.create_task(insert(store, [job(kind="p"), first, second], sync))
        await rival.wait_for_a_waiter(batch)
        await asyncio.to_thread(store.job_insert_many_sync, [first], rival.conn)
        rival.conn.rollback()  # lets the batch's retry through
        ids = await asyncio.wait_for(batch, 30)
    finally:
        rival.close()
    assert [_inserted(i) for i in ids[1:]] == [True, True]
    assert await store.job_count(JobFilter(kind="p")) == 1
    assert await store.job_count(JobFilter()) == 3


async def test_a_mixed_batch_that_waits_past_the_lock_timeout_writes_nothing(
    store: Store, store_url: str, backend: str
) -> None:
    """The user's own transaction holds a unique key (enqueued, not committed) longer
    than the database lets kiln wait for it (PostgreSQL: a lock_timeout on kiln's
    connections, as an operator may set; MariaDB: kiln's own innodb_lock_wait_timeout,
    10 s): the batch fails whole, its plain job not left behind, and once the user
    commits the same call inserts it once and returns the holder's id for the key."""
    if backend == "sqlite":
        pytest.skip("sqlite: one writer, so a batch waits for the lock before any write")
    mine = store if backend == "mysql" else store_from_url(_with_lock_timeout(store_url))
    await mine.open()
    user = Rival(store, backend)
    batch = [job(kind="p"), uniq("free"), uniq("held")]
    try:
        [held] = store.job_insert_many_sync([uniq("held")], user.conn)
        with pytest.raises(KilnError, match=r"(?i)lock"):
            await mine.job_insert_many(batch)
        assert await store.job_count(JobFilter()) == 0  # the user's row is not committed
        user.conn.commit()
        ids = await mine.job_insert_many(batch)
    finally:
        user.close()
        if mine is not store:
            await mine.close()
    assert [_inserted(i) for i in ids[1:]] == [True, False] and ids[2] == held
    assert await store.job_count(JobFilter(kind="p")) == 1


def _with_lock_timeout(url: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if "schema" in query:  # KILN_TEST_POSTGRES_VIA: no startup parameters (PgBouncer)
        pytest.skip("sets lock_timeout as a startup parameter, which poolers refuse")
    query["options"] = (query.get("options", "") + " -c lock_timeout=300").strip()
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))
