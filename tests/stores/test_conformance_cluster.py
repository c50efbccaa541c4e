"""Conformance: servers, the leader lease, rescue, sweep and prune.

Ages and leases wait on the database clock, moved forward by ``clock.advance``
(tests/stores/clock.py), not on sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest

from kiln._model._job import JobFilter, JobState, Outcome
from kiln.stores import Store
from tests.stores.clock import Clock, clockable
from tests.stores.factories import claim, complete, insert, job, result, roll_all, server


@pytest.fixture
def store_url(store_url: str) -> Iterator[str]:
    yield from clockable(store_url)


async def test_register_list_heartbeat_deregister(store: Store) -> None:
    await store.server_register(server("a", {"q": 3}))
    await store.server_register(server("b"))
    await store.server_register(server("a", {"q": 5}))  # re-registering replaces
    servers = {s.id: s for s in await store.server_list()}
    assert set(servers) == {"a", "b"} and servers["a"].queues == {"q": 5}
    assert servers["a"].kinds == ["k"] and servers["a"].heartbeat_at is not None
    assert servers["a"].heartbeat_age is not None and 0.0 <= servers["a"].heartbeat_age < 5
    assert await store.server_heartbeat("a")
    await store.server_deregister("a")
    assert not await store.server_heartbeat("a")  # gone: the server must rejoin
    assert [s.id for s in await store.server_list()] == ["b"]


async def test_a_heartbeat_says_the_connections_of_its_process(store: Store) -> None:
    """Migration 17: a heartbeat writes the connections its process holds; one without
    them (None) leaves the last said; a fresh registration says none yet."""
    await store.server_register(server("a"))
    [fresh] = await store.server_list()
    assert fresh.connections is None
    assert await store.server_heartbeat("a", 7)
    assert [s.connections for s in await store.server_list()] == [7]
    assert await store.server_heartbeat("a")
    assert [s.connections for s in await store.server_list()] == [7]
    assert await store.server_heartbeat("a", 2)
    assert [s.connections for s in await store.server_list()] == [2]
    assert not await store.server_heartbeat("gone", 3)


async def test_a_store_counts_the_connections_it_holds(store: Store) -> None:
    """From memory: at least one while open and in use (the pool's, or the file's)."""
    await store.server_list()
    assert store.connections() >= 1


async def test_heartbeat_age_follows_the_database_clock(store: Store, clock: Clock) -> None:
    await store.server_register(server("a"))
    await clock.advance(0.2)
    [before] = await store.server_list()
    assert before.heartbeat_age is not None and before.heartbeat_age >= 0.15
    await store.server_heartbeat("a")
    [after] = await store.server_list()
    assert after.heartbeat_age is not None and after.heartbeat_age < before.heartbeat_age


async def test_leader_lease_is_exclusive_until_it_expires(store: Store, clock: Clock) -> None:
    assert await store.leader_get() is None
    # leases of 40 s on the moved clock: a loaded machine's real seconds do not end them
    assert await store.leader_elect("a", 40)
    assert not await store.leader_elect("b", 40)
    assert await store.leader_elect("a", 40)  # renew
    assert await store.leader_get() == "a"
    await clock.advance(50)
    assert await store.leader_get() is None
    assert await store.leader_elect("b", 5)
    assert not await store.leader_elect("a", 5)
    assert await store.leader_get() == "b"


async def test_resign_and_deregister_give_up_the_lease(store: Store) -> None:
    assert await store.leader_elect("a", 30)
    await store.leader_resign("b")  # not the leader: nothing happens
    assert await store.leader_get() == "a"
    await store.leader_resign("a")
    assert await store.leader_get() is None
    assert await store.leader_elect("b", 30)
    await store.server_deregister("b")
    assert await store.leader_elect("a", 30)


async def test_concurrent_elections_have_one_winner(
    store: Store, other_store: Store, clock: Clock
) -> None:
    clock.add(other_store)
    for round_ in range(3):
        names = [f"r{round_}-{i}" for i in range(6)]
        stores = [store, other_store] * 3
        won = await asyncio.gather(*(s.leader_elect(n, 20) for s, n in zip(stores, names,
                                                                            strict=True)))
        assert sum(won) == 1
        await clock.advance(25)


async def test_rescue_candidates_only_from_silent_servers(store: Store, clock: Clock) -> None:
    await store.server_register(server("dead"))
    await store.server_register(server("alive"))
    await store.job_insert_many([job(args={"i": i}) for i in range(3)])
    [r1] = await claim(store, limit=1, server="dead")
    [r2] = await claim(store, limit=1, server="alive")
    [r3] = await claim(store, limit=1, server="never-registered")
    # dead_after 30 s on the moved clock: a loaded machine's real seconds do not reach it
    assert await store.jobs_rescue_candidates(30, 10) == []
    await clock.advance(20)
    await store.server_heartbeat("alive")
    await clock.advance(20)
    await store.server_heartbeat("alive")
    found = await store.jobs_rescue_candidates(30, 10)
    assert sorted((c.job.id, c.dead_server_id) for c in found) == sorted(
        [(r1.id, "dead"), (r3.id, "never-registered")]
    )
    assert all(c.job.state is JobState.RUNNING for c in found)
    assert len(await store.jobs_rescue_candidates(30, 1)) == 1
    # the rescuer's result, fenced like any other
    applied = await store.job_results_apply(
        [result(c.job, Outcome.RETRY, rescued=True, error="rescued") for c in found]
    )
    assert applied.applied == 2 and applied.released == {"q": 2}
    assert await store.jobs_rescue_candidates(30, 10) == []
    assert r2.server_id == "alive"


async def test_sweep_removes_servers_silent_for_long(store: Store, clock: Clock) -> None:
    await store.server_register(server("old"))
    await clock.advance(25)
    await store.server_register(server("new"))
    assert await store.servers_sweep(20) == 1
    assert [s.id for s in await store.server_list()] == ["new"]
    assert await store.servers_sweep(20) == 0


async def test_prune_is_bounded_by_limit_and_state(store: Store, clock: Clock) -> None:
    await store.job_insert_many([job(args={"i": i}) for i in range(5)])
    rows = await claim(store, limit=5)
    for row in rows[:4]:
        await complete(store, row)
    await store.job_results_apply([result(rows[4], Outcome.FAILED)])
    assert await store.jobs_prune(JobState.COMPLETED, 60, 10) == 0  # not old enough
    await roll_all(store, clock)  # the rollup has counted them: they may go
    assert await store.jobs_prune(JobState.COMPLETED, 0.01, 3) == 3
    assert await store.jobs_prune(JobState.COMPLETED, 0.01, 3) == 1
    assert await store.jobs_prune(JobState.COMPLETED, 0.01, 3) == 0
    counts = {c.state: c.count for c in await store.job_counts()}
    assert counts == {JobState.FAILED: 1}
    assert await store.jobs_prune(JobState.FAILED, 0.01, 3) == 1


async def test_prune_never_touches_unfinished_jobs(store: Store, clock: Clock) -> None:
    await insert(store, job(), job(delay=60))
    await claim(store, limit=1)
    await roll_all(store, clock)
    for state in JobState:
        await store.jobs_prune(state, 0.0, 100)
    assert await store.job_count(JobFilter()) == 2


async def test_jobs_running_on_a_server_past_a_margin(store: Store, clock: Clock) -> None:
    """Reconciliation's read: this server's running jobs, only those claimed long enough
    ago that no claim of its own can still be on its way back."""
    await store.job_insert_many([job(args={"i": i}) for i in range(5)])
    mine = await claim(store, limit=3, server="s1")
    [theirs] = await claim(store, limit=1, server="s2")
    assert await store.jobs_running_on("s1", 60.0, 100) == []  # all claimed just now
    await clock.advance(30)
    [late] = await claim(store, limit=1, server="s1")
    await complete(store, mine[0])
    found = await store.jobs_running_on("s1", 20, 100)
    assert [(r.id, r.queue, r.kind, r.attempt) for r in found] == [
        (row.id, "q", "k", 1) for row in mine[1:]
    ]
    assert late.id not in {r.id for r in found} and theirs.id not in {r.id for r in found}
    assert [r.id for r in await store.jobs_running_on("s1", 20, 1)] == [mine[1].id]


async def test_the_installation_id_is_made_once_by_the_migration(store: Store) -> None:
    """Migration 12 makes one random id per installation; migrating again keeps it."""
    first = await store.installation_get()
    assert first is not None and len(first) == 16 and int(first, 16) >= 0, first
    await store.migrate()
    assert await store.installation_get() == first


async def test_scheduled_jobs_that_fell_due_per_queue(store: Store, clock: Clock) -> None:
    """Scheduled jobs whose run_at has come by the database clock, by queue; those not
    yet due and the other states are not counted."""
    assert await store.queue_scheduled_due() == {}
    now = await store.now()
    await insert(store, job(run_at=now + timedelta(seconds=30)),
                 job(run_at=now + timedelta(seconds=30), queue="b"),
                 job(run_at=now + timedelta(seconds=3600), queue="b"),
                 job(queue="b"))  # available now: not scheduled
    assert await store.queue_scheduled_due() == {}
    await clock.advance(31)
    assert await store.queue_scheduled_due() == {"q": 1, "b": 1}
