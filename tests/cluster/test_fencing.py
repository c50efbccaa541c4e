"""A worker cut off from the database fences itself before anyone rescues its jobs,
and its late results change nothing.

PostgreSQL: the worker reaches the database through a loopback proxy that stops
forwarding, so its queries (heartbeat, results) hang and arrive late. SQLite: a gate
at the worker's store boundary does the same to that one process (see gate.py).
"""

from __future__ import annotations

from typing import Any

import kiln
from kiln._client._client import Client
from tests.support.cluster import Cluster
from tests.support.config import FAST
from tests.support.waits import wait_for

DEAD_AFTER = FAST["dead_after"]
HEARTBEAT = FAST["heartbeat_interval"]
KILL_GRACE = FAST["kill_grace"]


async def test_cut_off_worker_fences_before_rescue_and_late_result_is_fenced(
    cluster: Cluster,
) -> None:
    c = cluster
    leader = await c.start("leader", {"other": 1})
    await c.leader()
    w = await c.start("w", {"work": 2}, cuttable=True)
    client = Client(c.store)
    finish_first, finish_second = c.tmp / "first.go", c.tmp / "second.go"
    # finishes during the cut: its result is late; one attempt, so the rescue fails it
    first = await client.enqueue("work", {"until": str(finish_first)}, queue="work",
                                 max_attempts=1)
    # still running when the worker fences: cancelled, then rescued back to the queue
    second = await client.enqueue("work", {"until": str(finish_second)}, queue="work")
    await wait_for(lambda: len(c.events("start", pid=w.pid)) == 2, 10, "both jobs to start")

    cut_at = await w.cut()
    finish_first.touch()
    done = await wait_for(lambda: c.first("finish", job=first), 5, "the first job to finish")
    fenced = await wait_for(lambda: c.first("fenced", pid=w.pid), 5, "the fence")
    cancelled = await wait_for(
        lambda: c.first("cancelled", job=second), 5, "the running job to be cancelled"
    )
    def both_rescued() -> list[dict[str, Any]] | None:
        found = c.events("rescued")
        return found if len(found) == 2 else None

    rescues = await wait_for(both_rescued, DEAD_AFTER + 5, "both jobs to be rescued")
    first_rescue = rescues[0]["t"]
    print(f"[{c.backend}] cut off at 0: job finished {done['t'] - cut_at:.2f}s, fenced "
          f"{fenced['t'] - cut_at:.2f}s, running job cancelled {cancelled['t'] - cut_at:.2f}s, "
          f"jobs rescued {first_rescue - cut_at:.2f}s")
    assert done["t"] < fenced["t"]  # the first job's result is waiting to be written
    assert fenced["t"] - cut_at <= 3 * HEARTBEAT + 0.5
    assert cancelled["t"] - fenced["t"] <= KILL_GRACE + 0.2
    assert cancelled["t"] + KILL_GRACE < first_rescue  # fenced well before the rescue
    assert all(r["pid"] == leader.pid for r in rescues)
    assert {r["job"]: r["outcome"] for r in rescues} == {first: "failed", second: "retry"}
    assert not c.events("start", pid=w.pid)[2:], "a fenced worker must not claim"

    old_id = w.first_id
    await w.restore()

    def rejoined_and_flushed() -> bool:
        status = w.status()
        return bool(status and status["id"] != old_id and status["health"]["ok"]
                    and status["stats"]["results_pending"] == 0)

    await wait_for(rejoined_and_flushed, 15, "the worker to rejoin and flush its results")
    row = await c.store.job_get(first)
    assert row is not None
    # the late "completed" met the fence: the rescue's outcome stands
    assert row.state is kiln.JobState.FAILED and row.attempt == 1
    assert "rescued" in row.errors[-1].error
    assert w.status()["stats"]["completed"] == 1  # type: ignore[index]  # it did send it

    # the rescued job runs again on the worker under its new registration
    again = await wait_for(lambda: c.first("start", job=second, attempt=2), 10, "the rerun")
    assert again["pid"] == w.pid
    finish_second.touch()
    await wait_for(lambda: c.first("finish", job=second), 5, "the rerun to finish")

    async def second_completed() -> kiln.JobRow | None:
        row = await c.store.job_get(second)
        return row if row is not None and row.state is kiln.JobState.COMPLETED else None

    row = await wait_for(second_completed, 5, "the rerun's result")
    assert row.attempt == 2 and row.server_id == w.id != old_id
    servers = {s.id for s in await c.store.server_list()}
    assert w.id in servers
