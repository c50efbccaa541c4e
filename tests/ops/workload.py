"""The bounded workload of the live ops test: real kiln servers doing what operators
chart and alert on.

Owns the test app's job kinds and the scenarios: jobs that complete, retry and fail
for good, rate-limited jobs, a job handed back at shutdown, a job of a dead server that
the leader rescues, and a server whose heartbeats fail until it fences itself (its
running job is then rescued too). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

import kiln
from kiln._model._job import ServerInfo
from kiln.stores import Store
from tests.support.config import fast
from tests.support.waits import wait_for

# heartbeat 0.5 s: a worker starved of CPU for ~0.6 s on a loaded 2-core machine
# would otherwise fence itself and fire alerts the test says must stay quiet
FAST = fast(heartbeat_interval=0.5, dead_after=7.0, shutdown_timeout=0.3)
# for servers whose timing the test does not show (staging's): fenced only after 3 s
STEADY = fast(heartbeat_interval=1.0, dead_after=9.0, leader_ttl=3.0, shutdown_timeout=0.3)
DEAD_SERVER = "ops-test-dead-server"


def make_app(url: str) -> kiln.App:
    app = kiln.App(url)

    @app.job("ok")
    async def ok(job: kiln.Job) -> None:
        await asyncio.sleep(float(job.args.get("seconds", 0.005)))

    @app.job("flaky", max_attempts=2, backoff=kiln.Constant(0.1))
    async def flaky(job: kiln.Job) -> None:
        raise RuntimeError(f"flaky fails attempt {job.attempt}")

    @app.job("limited", queue="limited", rate_limit=kiln.RateLimit(rate=2, per=1.0))
    async def limited(job: kiln.Job) -> None:
        return None

    # a global concurrency limit per tenant (the "Global concurrency in use" panel):
    # half-second jobs, two a second, so some are running at most scrapes
    @app.job("capped", concurrency=kiln.Concurrency(max=2, key="args.tenant"))
    async def capped(job: kiln.Job) -> None:
        await asyncio.sleep(0.5)

    @app.job("long", queue="handback")
    async def long(job: kiln.Job) -> None:
        await asyncio.sleep(60)

    return app


async def run_server(server: kiln.Server) -> asyncio.Task[None]:
    task = asyncio.create_task(server.run())
    await wait_for(lambda: task.done() or server.stats().state == "running", 15,
                     "server running")
    if task.done():
        await task
    return task


async def stop_server(server: kiln.Server, task: asyncio.Task[None]) -> None:
    server.stop(force=True)
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(task, 15)


async def hand_back_one_job(app: kiln.App, server: kiln.Server) -> None:
    """Run ``server`` until it holds a long job, then stop it: the job is handed back."""
    task = await run_server(server)
    await app.aenqueue("long", {})
    await wait_for(lambda: server.running_jobs == 1, 15, "the long job running")
    server.stop()
    await asyncio.wait_for(task, 15)
    assert server.stats().handed_back == 1


async def claim_as_dead_server(store: Store, app: kiln.App) -> int:
    """A running job whose server never heartbeats again: the leader must rescue it."""
    job_id = await app.aenqueue("ok", {"rescue": True})
    await store.server_register(ServerInfo(
        id=DEAD_SERVER, host="gone", pid=0, queues={"default": 1}, kinds=["ok"],
        version=kiln.__version__, started_at=datetime.now(UTC)))
    rows = await store.job_claim("default", ["ok"], 1, DEAD_SERVER)
    assert [r.id for r in rows] == [job_id]
    return job_id


async def pause_briefly(store: Store, server: kiln.Server, queue: str = "limited") -> None:
    """Pause ``queue`` for two scrapes, then resume it (the Paused queues panel)."""
    client = kiln.Client(store)
    await client.pause_queue(queue, actor="ops-test")
    await wait_for(lambda: server.stats().queues[queue].paused, 5, "the pause applied")
    await asyncio.sleep(2.5)
    await client.resume_queue(queue, actor="ops-test")
    await wait_for(lambda: not server.stats().queues[queue].paused, 5, "the resume applied")


async def enqueue_steadily(app: kiln.App, stop: asyncio.Event) -> int:
    """Every 0.1 s a job that completes; every second one that fails for good, three
    rate-limited ones (admitted at 2/s), two capped ones (a global concurrency limit of
    2 per tenant, over two tenants), and a long one that is cancelled a second later
    (while it runs: the cancel latency panel). Bounded by ``stop`` and 90 s."""
    began = time.monotonic()
    tick = 0
    doomed: int | None = None
    while not stop.is_set() and time.monotonic() - began < 90:
        await app.aenqueue("ok", {"tick": tick})
        if tick % 10 == 0:
            await app.aenqueue("flaky", {"tick": tick})
            await app.aenqueue_many([("limited", {"tick": tick, "n": n}) for n in range(3)])
            await app.aenqueue_many([("capped", {"tick": tick, "tenant": t}) for t in "ab"])
            if doomed is not None:
                await app.client().cancel(kiln.filter_of(ids=[doomed]), actor="ops-test")
            doomed = await app.aenqueue("ok", {"tick": tick, "seconds": 30})
        tick += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
    return tick


async def fence_once(server: kiln.Server) -> None:
    """Fail the server's heartbeats (the store raises, as when the database is away)
    until it fences itself, then let them pass: it rejoins under a new id."""
    store: Any = server._store
    fenced = server.stats().fenced

    async def unreachable(server_id: str, connections: int | None = None) -> bool:
        raise kiln.StoreError("server_heartbeat", "injected by the ops test: database away")

    store.server_heartbeat = unreachable
    try:
        await wait_for(lambda: server.stats().fenced > fenced, 10, "the server fencing")
    finally:
        del store.server_heartbeat  # the store's own method again
    await wait_for(lambda: bool(server.healthy()), 10, "the server rejoining")


async def fence_while_running(app: kiln.App, store: Store, server: kiln.Server) -> int:
    """Fence ``server`` while it runs a 5 s job: the job is cancelled without a result
    and left to the rescuer, since the registration it ran under is now silent."""
    job_id = await app.aenqueue("ok", {"seconds": 5})
    deadline = time.monotonic() + 10
    while (row := await store.job_get(job_id)) is None or row.state != kiln.JobState.RUNNING:
        assert time.monotonic() < deadline, f"job {job_id} never ran: {row}"
        await asyncio.sleep(0.05)
    await fence_once(server)
    return job_id


# ------------------------------------------------------- the staging deployment
STAGING_QUEUES = {f"q{i}": 1 for i in range(10)}
STAGING_KINDS = [f"k{i:02d}" for i in range(40)]


def many_kinds_app(url: str) -> kiln.App:
    """40 kinds declared over 10 queues (4 each): past the seeding budget's full matrix,
    so each kind is seeded in its own queue."""
    app = kiln.App(url)
    for i, name in enumerate(STAGING_KINDS):
        async def handler(job: kiln.Job) -> None:
            return None

        app.job(name, queue=f"q{i % 10}")(handler)
    return app


async def run_every_staging_kind(app: kiln.App) -> list[int]:
    """One job of every kind, each into its own queue (q9 included)."""
    return [await app.aenqueue(name, {}) for name in STAGING_KINDS]
