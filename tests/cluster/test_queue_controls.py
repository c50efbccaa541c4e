"""Queue controls across two real worker processes: pause, resume, runtime concurrency.

Pause: once ``pause_queue`` returned, no server claims a job of the queue (every
claim's attempted_at, on the database clock, is before the moment the pause was
confirmed); running jobs finish; enqueueing goes on; resume makes both claim again.
The time from the pause to the last claim is printed (docs/operating.md quotes it).
Concurrency: a new limit holds on both servers without a restart, lowering it cancels
nothing, and a per-server limit holds on that server only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from kiln._client._client import Client
from kiln._model._job import JobFilter, JobState
from tests.support.cluster import Cluster, Worker
from tests.support.waits import wait_for

SLACK = 5.0  # seconds: two processes and a database on a loaded 2-core machine


def _queue_stats(w: Worker) -> dict[str, object]:
    status = w.status()
    return status["stats"]["queues"]["work"] if status else {}


async def _obeyed(c: Cluster, workers: list[Worker], **expect: object) -> None:
    def all_obey() -> bool:
        return all(all(_queue_stats(w).get(k) == v for k, v in expect.items())
                   for w in workers)

    await wait_for(all_obey, SLACK, f"both workers to report {expect}")


def _peak_after(c: Cluster, pid: int, since: float) -> int:
    """Most jobs the worker ``pid`` ran at once as it started a job after ``since``
    (counting the jobs it started before), from its start and finish lines."""
    changes = [(e["t"], 1) for e in c.events("start", pid=pid)]
    changes += [(e["t"], -1) for e in c.events("finish", pid=pid)]
    running = peak = 0
    for t, delta in sorted(changes, key=lambda x: (x[0], x[1])):
        running += delta
        if delta > 0 and t >= since:
            peak = max(peak, running)
    return peak


async def test_both_servers_stop_claiming_once_a_pause_is_confirmed(cluster: Cluster) -> None:
    c = cluster
    a, b = await asyncio.gather(c.start("a", {"work": 2}), c.start("b", {"work": 2}))
    client = Client(c.store)
    stop = asyncio.Event()

    async def feed() -> None:  # a steady stream of short jobs, before and after the pause
        while not stop.is_set():
            await client.enqueue("work", {"seconds": 0.05}, queue="work")
            await asyncio.sleep(0.01)

    feeder = asyncio.create_task(feed())
    try:
        await wait_for(lambda: len({e["pid"] for e in c.events("start")}) == 2, 20,
                         "both workers to run jobs")
        assert await client.pause_queue("work", actor="test") is True
        confirmed = await c.store.now()  # the pause committed before this
        await _obeyed(c, [a, b], paused=True)
        await asyncio.sleep(0.5)  # jobs keep coming while paused
    finally:
        stop.set()
        await feeder
    pause = (await c.store.queue_controls()).pause_of("work")
    assert pause is not None and pause.paused_by == "test"
    rows = await c.store.job_list(JobFilter(queue="work"), limit=1000)
    claims = [r.attempted_at for r in rows if r.attempted_at is not None]
    assert claims and max(claims) <= confirmed, "a job was claimed after the pause"
    print(f"\n[{c.backend}] pause-to-last-claim: "
          f"{(max(claims) - pause.paused_at).total_seconds() * 1000:+.1f} ms"
          f" (negative: the last claim came before the pause's own timestamp)")
    waiting = await c.store.job_count(JobFilter(queue="work", states=(JobState.AVAILABLE,)))
    assert waiting > 0  # enqueued into the paused queue, not run

    async def none_running() -> bool:
        running = JobFilter(queue="work", states=(JobState.RUNNING,))
        return await c.store.job_count(running) == 0

    await wait_for(none_running, SLACK, "the running jobs to finish")
    assert not c.events("cancelled")  # running jobs finished; none was cancelled

    resumed_at = (await c.store.now())
    assert await client.resume_queue("work", actor="test") == 1

    async def drained() -> bool:
        idle = JobFilter(queue="work", states=(JobState.AVAILABLE, JobState.RUNNING))
        return await c.store.job_count(idle) == 0

    await wait_for(drained, SLACK * 2, "both workers to drain the queue")
    after = await c.store.job_list(JobFilter(queue="work"), limit=1000)
    servers = {r.server_id for r in after if r.attempted_at and r.attempted_at > resumed_at}
    assert servers == {a.id, b.id}, "both workers claim again after the resume"
    actions = [e.action for e in await c.store.audit_list()]
    assert actions[:2] == ["queue_resume", "queue_pause"]


async def test_concurrency_changes_hold_on_both_servers(cluster: Cluster, tmp_path: Path) -> None:
    c = cluster
    a, b = await asyncio.gather(c.start("a", {"work": 3}), c.start("b", {"work": 3}))
    client = Client(c.store)
    gate = tmp_path / "go"
    long = [await client.enqueue("work", {"until": str(gate)}, queue="work")
            for _ in range(6)]

    async def all_running() -> bool:
        return await c.store.job_count(JobFilter(ids=tuple(long),
                                                 states=(JobState.RUNNING,))) == 6

    await wait_for(all_running, 20, "six jobs running on the two workers")
    await client.set_concurrency("work", 1, actor="test")  # lowered below what runs
    await _obeyed(c, [a, b], concurrency=1)
    assert not c.events("cancelled")  # lowering cancels nothing
    marker = len(c.events("start"))
    gate.touch()
    short = [await client.enqueue("work", {"seconds": 0.1}, queue="work") for _ in range(8)]

    async def finished(ids: Sequence[int]) -> bool:
        done = JobFilter(ids=tuple(ids), states=(JobState.COMPLETED,))
        return await c.store.job_count(done) == len(ids)

    await wait_for(lambda: finished(long + short), SLACK * 2, "every job to finish")
    assert {e["job"] for e in c.events("finish")} >= set(long)  # ran to their end
    later = c.events("start")[marker:]
    assert later and all(_peak_after(c, w.pid, later[0]["t"]) <= 1 for w in (a, b))
    assert {e["pid"] for e in later} == {a.pid, b.pid}

    await client.set_concurrency("work", 3, server=b.id, actor="test")  # one server only
    await _obeyed(c, [b], concurrency=3)
    await _obeyed(c, [a], concurrency=1)
    marker_t = (c.events("start") or [{"t": 0}])[-1]["t"]
    more = [await client.enqueue("work", {"seconds": 0.3}, queue="work") for _ in range(12)]
    await wait_for(lambda: finished(more), SLACK * 3, "the third batch to finish")
    assert _peak_after(c, a.pid, marker_t) <= 1
    assert 2 <= _peak_after(c, b.pid, marker_t) <= 3  # raised on b: it runs more at once
    states = {s.queue: s for s in await client.queues()}
    assert states["work"].concurrency == {a.id: 1, b.id: 3}
    assert states["work"].configured == {a.id: 3, b.id: 3}

