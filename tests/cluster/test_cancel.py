"""Cancel a running job from a third process: two real workers each run one job (an
``async def`` and a plain ``def`` handler); the test process cancels both, and each
handler stops on its own worker within the bound: one notification (PostgreSQL's
NOTIFY, or a RedisBus on SQLite and MySQL), or one heartbeat_interval without
notifications. The jobs end cancelled, with the actor recorded, on attempt 1, and
never run again.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

import pytest

import kiln
from kiln._client._client import Client
from tests.support.cluster import Cluster
from tests.support.config import FAST
from tests.support.waits import wait_for

# a longer heartbeat than FAST's: a worker starved of CPU for 3 heartbeats fences
# itself, which would stop its handler too (and leave the job to a rescue)
HEARTBEAT = 0.5
CONFIG: dict[str, Any] = {"heartbeat_interval": HEARTBEAT, "dead_after": 8.0}
SLACK = 1.0  # process scheduling on a 2-core machine, the database's commit
REDIS_URL = os.environ.get("KILN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _notifications(c: Cluster, notify: bool) -> tuple[dict[str, Any], kiln.Bus | None]:
    """The workers' spec and the cancelling client's bus for this variant."""
    if not notify:
        return ({"listen": False} if c.backend == "postgresql" else {}), None
    if c.backend == "postgresql":
        return {}, None  # the store's own LISTEN/NOTIFY
    channel = f"kiln-{uuid.uuid4().hex[:10]}"
    return {"bus": {"url": REDIS_URL, "channel": channel}}, kiln.RedisBus(REDIS_URL, channel)


@pytest.mark.parametrize("notify", [True, False], ids=["notified", "polled"])
async def test_a_cancel_from_a_third_process_stops_handlers_on_both_workers(
    cluster: Cluster, notify: bool
) -> None:
    c = cluster
    spec, bus = _notifications(c, notify)
    a, b = await asyncio.gather(c.start("a", {"hold": 1}, spec=spec, **CONFIG),
                                c.start("b", {"hold": 1}, spec=spec, **CONFIG))
    client = Client(c.store, bus=bus)
    try:
        ids = [await client.enqueue("hold", {}, queue="hold"),
               await client.enqueue("hold_sync", {}, queue="hold")]

        def both_started() -> bool:
            starts = c.events("start")
            return {e["job"] for e in starts} == set(ids) and len({e["pid"] for e in starts}) == 2

        await wait_for(both_started, 20, "each worker to start one job")
        asked = time.time()
        cancelled = await client.cancel(kiln.filter_of(ids=ids), actor="ops:test")
        assert cancelled == 2

        def both_stopped() -> bool:
            return {e["job"] for e in c.events("stopped")} == set(ids)

        bound = SLACK if notify else HEARTBEAT + SLACK
        await wait_for(both_stopped, bound + 5, "both handlers to stop")
        for e in c.events("stopped"):
            took = e["t"] - asked
            where = "a" if e["pid"] == a.pid else "b"
            print(f"[{c.backend} {'notified' if notify else 'polled'}] job {e['job']} on {where}:"
                  f" handler stopped {took * 1000:.0f} ms after the cancel")
            assert took < bound, (e, took)
        assert {e["pid"] for e in c.events("stopped")} == {a.pid, b.pid}

        async def settled() -> bool:  # the fenced results ended both attempts
            return await c.store.jobs_cancel_requested(ids) == []

        await wait_for(settled, 5, "the attempts to end")
        await asyncio.sleep(3 * FAST["poll_interval"])  # a retry would start by now
        for job_id in ids:
            row = await c.store.job_get(job_id)
            assert row is not None and row.state is kiln.JobState.CANCELLED
            assert row.attempt == 1
            assert [e.error for e in row.errors] == ["Cancelled by ops:test"]
        assert len(c.events("start")) == 2 and not c.events("finish")
        assert not c.events("fenced")
        latencies = c.events("cancel_latency")
        assert {e["job"] for e in latencies} == set(ids)
        assert all(0 <= e["latency"] < bound and not e["stuck"] for e in latencies), latencies
    finally:
        if bus is not None:
            await bus.close()
