"""Dead workers: kill -9 mid-job, a dead leader, and a job that kills its own process.

Every figure comes from the shared log of real worker processes on one host; the
bounds follow the operator's guide: a dead server's jobs start again after dead_after
and within one more heartbeat_interval (plus the claim's poll and a little slack).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import kiln
from kiln._client._client import Client
from kiln._model._job import FINISHED_STATES
from tests.support.cluster import Cluster
from tests.support.config import FAST
from tests.support.waits import wait_for

DEAD_AFTER = FAST["dead_after"]
HEARTBEAT = FAST["heartbeat_interval"]
TTL = FAST["leader_ttl"]
POLL = FAST["poll_interval"]
SLACK = 1.0  # process scheduling on a 2-core machine, the database's commit


async def enqueue(c: Cluster, kind: str, args: dict[str, object], **options: Any) -> int:
    return await Client(c.store).enqueue(kind, args, queue=kind, **options)


async def completed(c: Cluster, ids: list[int]) -> None:
    """Wait until the workers' results for ``ids`` are written (they go in batches)."""
    async def written() -> bool:
        rows = [await c.store.job_get(i) for i in ids]
        return all(r is not None and r.state in FINISHED_STATES for r in rows)

    await wait_for(written, 5, f"the results of jobs {ids}")


async def test_killed_worker_jobs_run_again_within_dead_after(cluster: Cluster) -> None:
    c = cluster
    leader = await c.start("leader", {"other": 1})
    await c.leader()
    a, b = await asyncio.gather(c.start("a", {"work": 2}), c.start("b", {"work": 2}))
    ids = [await enqueue(c, "work", {"seconds": 2.0}) for _ in range(4)]

    def a_started_two() -> bool:
        return len(c.events("start", pid=a.pid)) >= 1 and len(c.events("start")) >= 3

    await wait_for(a_started_two, 20, "jobs to start on both workers")
    killed_at = a.kill()
    running = {e["job"] for e in c.events("start", pid=a.pid)} - {
        e["job"] for e in c.events("finish", pid=a.pid)
    }
    assert running, "worker a should have died with jobs running"

    def all_finished() -> bool:
        return {e["job"] for e in c.events("finish")} >= set(ids)

    await wait_for(all_finished, DEAD_AFTER + 10, "every job to finish")
    rescued = c.events("rescued")
    lost = {e["job"] for e in rescued}  # may include a job a claimed but had not started
    assert running <= lost and all(e["pid"] == leader.pid for e in rescued)
    assert {e["dead"] for e in rescued} == {a.first_id}
    for job_id in sorted(lost):
        again = c.first("start", job=job_id, attempt=2)
        assert again is not None and again["pid"] == b.pid
        delay = again["t"] - killed_at
        print(f"[{c.backend}] job {job_id}: killed worker's job started again after "
              f"{delay:.2f}s (dead_after={DEAD_AFTER}, heartbeat_interval={HEARTBEAT})")
        assert DEAD_AFTER - HEARTBEAT - 0.3 <= delay <= DEAD_AFTER + HEARTBEAT + POLL + SLACK
    finishes = collections.Counter(e["job"] for e in c.events("finish"))
    assert all(finishes[j] == 1 for j in ids), finishes  # none completed twice
    await completed(c, ids)
    for job_id in ids:
        row = await c.store.job_get(job_id)
        assert row is not None and row.state is kiln.JobState.COMPLETED
        if job_id in lost:
            assert row.attempt == 2  # the rescued attempt counted
            assert "rescued" in row.errors[-1].error
        else:
            assert row.attempt == 1 and not row.errors


async def test_dead_leader_is_replaced_and_waits_before_rescuing(cluster: Cluster) -> None:
    c = cluster
    a = await c.start("a", {"work": 1})
    assert (await c.leader()) is a
    b = await c.start("b", {"work": 1})
    for _ in range(2):  # one on each worker
        await enqueue(c, "work", {"seconds": 3.0})
    await wait_for(lambda: len(c.events("start")) == 2, 20, "both jobs to start")
    started = c.first("start", pid=a.pid)
    assert started is not None and c.first("start", pid=b.pid) is not None
    on_a = started["job"]
    killed_at = a.kill()
    assert not c.first("finish", job=on_a)

    gained = await wait_for(
        lambda: c.first("leader", pid=b.pid, is_leader=True), TTL + 5, "b to become leader"
    )
    takeover = gained["t"] - killed_at
    rescue = await wait_for(
        lambda: c.first("rescued", job=on_a), TTL + DEAD_AFTER + 10, "the rescue"
    )
    waited = rescue["t"] - gained["t"]
    again = await wait_for(lambda: c.first("start", job=on_a, attempt=2), 5, "the rerun")
    print(f"[{c.backend}] leader killed: new leader after {takeover:.2f}s (leader_ttl={TTL}); "
          f"first rescue {waited:.2f}s after taking over (dead_after + heartbeat_interval = "
          f"{DEAD_AFTER + HEARTBEAT}); job started again {again['t'] - killed_at:.2f}s "
          f"after the kill")
    renew = TTL / 3
    assert TTL - renew - 0.1 <= takeover <= TTL + renew + SLACK
    assert DEAD_AFTER + HEARTBEAT - 0.05 <= waited <= DEAD_AFTER + 2 * HEARTBEAT + SLACK
    assert rescue["pid"] == b.pid and again["pid"] == b.pid
    await wait_for(lambda: c.first("finish", job=on_a), 5, "the rerun to finish")
    await completed(c, [on_a])
    row = await c.store.job_get(on_a)
    assert row is not None and row.state is kiln.JobState.COMPLETED and row.attempt == 2


async def test_job_that_kills_its_process_twice_waits_its_backoff(cluster: Cluster) -> None:
    c = cluster
    await c.start("leader", {"other": 1})
    await c.leader()
    workers = await asyncio.gather(*(c.start(f"w{i}", {"crash": 1}) for i in range(3)))
    backoff = 2.0
    job_id = await enqueue(c, "crash", {"die_attempts": 2}, backoff=kiln.Constant(backoff),
                           max_attempts=5)
    budget = 2 * (DEAD_AFTER + HEARTBEAT + SLACK) + backoff + 10
    done = await wait_for(lambda: c.first("finish", job=job_id), budget, "the third attempt")
    starts = c.events("start", job=job_id)
    rescues = c.events("rescued", job=job_id)
    assert [s["attempt"] for s in starts] == [1, 2, 3]
    assert len({s["pid"] for s in starts}) == 3  # each attempt took its worker down with it
    assert [r["attempt"] for r in rescues] == [1, 2]
    straight_back = starts[1]["t"] - rescues[0]["t"]
    after_backoff = starts[2]["t"] - rescues[1]["t"]
    print(f"[{c.backend}] first rescue -> attempt 2 after {straight_back:.2f}s; second rescue "
          f"-> attempt 3 after {after_backoff:.2f}s (backoff {backoff}s)")
    assert straight_back < POLL + SLACK
    assert backoff - 0.05 <= after_backoff <= backoff + POLL + SLACK
    assert done["pid"] == starts[2]["pid"] and done["pid"] in {w.pid for w in workers}
    await completed(c, [job_id])
    row = await c.store.job_get(job_id)
    assert row is not None and row.state is kiln.JobState.COMPLETED and row.attempt == 3
    assert sum("rescued" in e.error for e in row.errors) == 2
