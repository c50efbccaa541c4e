"""Pool under queue controls: a pause hands back the jobs claimed ahead at once, claims
nothing more and lets running jobs finish; a lowered concurrency cancels nothing and
starts nothing new until the running jobs are under it; resuming claims again."""

from __future__ import annotations

import asyncio

from kiln._config import ServerConfig
from kiln._events import EventHub
from kiln._handle import Job
from kiln._job import Outcome
from kiln._kinds import make_kind
from kiln._server._completer import Completer
from kiln._server._executor import Executor
from kiln._server._identity import Identity
from kiln._server._pool import Pool
from kiln._server._threads import ThreadPool
from tests.test_pool import CONCURRENCY, FakeStore, _no_params


async def _until(condition: object, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not (condition() if callable(condition) else condition):
            await asyncio.sleep(0.005)


async def test_pause_and_lowered_concurrency() -> None:
    store = FakeStore(1000)
    gate = asyncio.Event()
    started: list[int] = []

    async def handler(job: Job) -> None:
        started.append(job.id)
        if len(started) > 40:  # quick at first (the pool claims ahead), then blocked
            await gate.wait()

    config = ServerConfig(poll_interval=0.05, heartbeat_interval=0.2, kill_grace=0.2,
                          dead_after=6, leader_ttl=1)
    events = EventHub()
    threads = ThreadPool(2)
    identity = Identity.named("s1")
    executor = Executor({"k": make_kind("k", handler, queue="q")}, config, events, threads,
                        identity, _no_params, [])
    completer = Completer(store, config, events, lambda released, reason: None)  # type: ignore[arg-type]
    pool = Pool("q", CONCURRENCY, ["k"], store, executor, completer,  # type: ignore[arg-type]
                events, identity, 0.05, lambda: True)
    store.pool = pool
    await completer.start()
    await pool.start()
    try:
        await _until(lambda: len(started) == 40 + CONCURRENCY and pool.waiting > 0)
        pool.set_paused(True)
        assert pool.waiting == 0  # the jobs claimed ahead go back at once
        running = list(pool.running)
        assert len(running) == CONCURRENCY  # running jobs go on
        asked = len(store.asked)
        pool.set_concurrency(1)  # lowered below what runs: nothing is cancelled
        await asyncio.sleep(0.2)  # four poll intervals
        assert len(store.asked) == asked  # paused: no claim
        assert not any(t.done() for t in running)
        pool.set_paused(False)
        await asyncio.sleep(0.1)
        assert len(store.asked) == asked  # 4 running, limit 1: still no room
        gate.set()
        await _until(lambda: len(started) > 40 + CONCURRENCY)  # claims again once under it
        assert len(pool.running) <= 1
    finally:
        gate.set()
        await pool.stop_claiming()
        await completer.stop()
        threads.shutdown()
    handed = [r for r in store.results if r.outcome is Outcome.HANDED_BACK]
    assert handed and not {r.job_id for r in handed} & set(started)  # none had started
