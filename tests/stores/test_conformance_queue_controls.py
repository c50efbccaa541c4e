"""Conformance: queue controls (pause, resume, concurrency limits) and their audit rows."""

from __future__ import annotations

import asyncio

from kiln._model._controls import FLEET
from kiln.stores import Store
from tests.stores.factories import claim, insert, job


async def test_a_paused_queue_is_not_claimed_and_still_takes_jobs(store: Store) -> None:
    await insert(store, job(), job(queue="other"))
    assert await store.queue_pause("q", "alice") is True
    assert await store.queue_pause("q", "bob") is False  # paused already: unchanged
    await insert(store, job())  # enqueue into a paused queue works
    assert await claim(store) == []
    assert len(await claim(store, queue="other")) == 1  # other queues run on
    controls = await store.queue_controls()
    assert [(p.queue, p.paused_by) for p in controls.pauses] == [("q", "alice")]
    assert controls.pauses[0].paused_at.tzinfo is not None
    assert await store.queue_resume("q", "carol") == 1
    assert await store.queue_resume("q", "carol") == 0
    assert len(await claim(store)) == 2
    audit = [(e.actor, e.action, e.count, e.detail) for e in await store.audit_list()]
    assert audit == [("carol", "queue_resume", 0, {"queue": "q"}),
                     ("carol", "queue_resume", 1, {"queue": "q"}),
                     ("bob", "queue_pause", 0, {"queue": "q"}),
                     ("alice", "queue_pause", 1, {"queue": "q"})]


async def test_pausing_every_queue(store: Store) -> None:
    await insert(store, job(), job(queue="other"))
    await store.queue_pause("other", "alice")
    assert await store.queue_pause("*", "alice") is True
    assert await claim(store) == [] and await claim(store, queue="other") == []
    assert (await store.queue_controls()).paused("q")
    assert await store.queue_resume("*", "bob") == 2  # lifts every pause
    assert len(await claim(store)) == 1 and len(await claim(store, queue="other")) == 1
    assert (await store.queue_controls()).pauses == ()


async def test_concurrency_limits_fleet_wide_and_per_server(store: Store) -> None:
    await store.queue_limit_set("q", FLEET, 3, "alice")
    await store.queue_limit_set("q", "s1", 1, "alice")
    await store.queue_limit_set("q", FLEET, 4, "bob")  # replaces the fleet's
    controls = await store.queue_controls()
    assert [(lim.queue, lim.server_id, lim.concurrency, lim.set_by)
            for lim in controls.limits] == [("q", "", 4, "bob"), ("q", "s1", 1, "alice")]
    assert controls.limit_of("q", "s1", 10) == 1
    assert controls.limit_of("q", "s2", 10) == 4
    assert controls.limit_of("other", "s1", 10) == 10
    await store.queue_limit_set("q", "s1", None, "carol")  # back to the fleet's
    assert (await store.queue_controls()).limit_of("q", "s1", 10) == 4
    entry = (await store.audit_list(limit=1))[0]
    assert (entry.actor, entry.action, entry.detail) == (
        "carol", "queue_concurrency", {"queue": "q", "server": "s1", "concurrency": None})


async def test_pause_holds_against_concurrent_claims(store: Store, other_store: Store) -> None:
    """Once queue_pause returned, no claim that starts afterwards takes a job."""
    await insert(store, *[job() for _ in range(50)])
    await store.queue_pause("q", "alice")
    got = await asyncio.gather(*(claim(s, limit=5) for s in [store, other_store] * 3))
    assert all(rows == [] for rows in got)
