"""Plain def handlers, which a thread runs and nothing can interrupt, on every store:

- their timeout starts when their thread starts them, not while they wait for one;
- a handler still running after its timeout keeps its slot (its thread is stuck): the
  pool does not claim jobs that would only wait for a thread and burn their attempts,
  stats() counts it, and health fails while stuck handlers hold every slot;
- on shutdown a sync job is handed back only once its thread ended or kill_grace
  passed, and then its record says that the handler may still be running.

Issue 22, defects 5 and 6 (issue 17, hole 2).
"""

from __future__ import annotations

import asyncio
import threading
import time

import kiln
import kiln.events
from tests.integration.inprocess import Running, config, job_of, open_store
from tests.support.waits import wait_for

STILL_RUNNING = "may have gone on running"


async def test_a_sync_timeout_starts_when_its_thread_starts_the_handler(store_url: str) -> None:
    app = kiln.App(store_url)

    @app.job("nap", timeout=0.6, max_attempts=1)
    def nap(job: kiln.Job) -> None:
        time.sleep(0.25)

    store = await open_store(store_url)
    try:
        ids = [await kiln.Client(store, app.kinds).enqueue("nap", {}) for _ in range(4)]
        # one thread for four slots: the last job waits ~0.75 s for it, past its timeout
        running = await Running(app.server({"default": 4}, config(sync_threads=1))).started()
        try:
            async def done() -> bool:
                rows = [await job_of(store, i) for i in ids]
                return all(r.state in (kiln.JobState.COMPLETED, kiln.JobState.FAILED)
                           for r in rows)

            await wait_for(done, 15, "every job to end")
        finally:
            await running.stop()
        rows = [await job_of(store, i) for i in ids]
        assert [r.state for r in rows] == [kiln.JobState.COMPLETED] * 4, [r.errors for r in rows]
    finally:
        await store.close()


async def test_hung_sync_handlers_keep_their_slots_and_fail_health_until_they_return(
    store_url: str,
) -> None:
    app = kiln.App(store_url)
    release = threading.Event()
    quick_runs: list[int] = []

    @app.job("hang", timeout=0.3, max_attempts=2, backoff=kiln.Constant(30))
    def hang(job: kiln.Job) -> None:
        release.wait(20)  # ignores job.cancelled: a handler that cannot be interrupted

    @app.job("quick", timeout=0.5, max_attempts=2)
    def quick(job: kiln.Job) -> None:
        quick_runs.append(job.id)

    store = await open_store(store_url)
    client = kiln.Client(store, app.kinds)
    server = app.server({"default": 2}, config(kill_grace=0.2))
    running = await Running(server).started()
    try:
        hung = [await client.enqueue("hang", {}) for _ in range(2)]

        def stuck_everywhere() -> bool:
            return bool(server.stats().handlers_stuck == 2)

        await wait_for(stuck_everywhere, 10, "both hung handlers to be stuck")
        quick_ids = [await client.enqueue("quick", {}) for _ in range(4)]
        health = server.healthy()
        assert not health and health.handlers_stuck, health
        assert any("queue default: all 2 slots held" in r for r in health.reasons), health
        stats = server.stats()
        assert stats.threads_stuck == 2 and stats.queues["default"].stuck == 2
        assert len(running.of(kiln.events.HandlerStuck)) == 2
        assert {e.reason for e in running.of(kiln.events.HandlerStuck)} == {"timeout"}
        async def written() -> bool:  # results are written in batches, a moment later
            rows = [await job_of(store, i) for i in hung]
            return all(r.state is kiln.JobState.SCHEDULED for r in rows)

        await wait_for(written, 10, "the timed-out attempts to be written")
        for job_id in hung:  # each timed out, and its record says the thread went on
            row = await job_of(store, job_id)
            assert row.attempt == 1, row.attempt
            assert "timed out after 0.3s" in row.errors[0].error
            assert STILL_RUNNING in row.errors[0].error, row.errors[0].error
        await asyncio.sleep(0.6)  # the slots stay taken: nothing is claimed to wait for a thread
        assert quick_runs == [] and server.stats().claimed == 2
        release.set()

        async def quick_done() -> bool:
            rows = [await job_of(store, i) for i in quick_ids]
            return all(r.state is kiln.JobState.COMPLETED for r in rows)

        await wait_for(quick_done, 10, "the quick jobs to complete")
        for job_id in quick_ids:
            row = await job_of(store, job_id)
            assert row.attempt == 1 and row.errors == [], row.errors  # no attempt burned
        await wait_for(lambda: bool(server.healthy()), 5, "health to come back")
        assert server.stats().handlers_stuck == 0 and server.stats().threads_stuck == 0
    finally:
        release.set()
        await running.stop()
        await store.close()


async def test_shutdown_hands_a_sync_job_back_only_after_its_thread_ended(
    store_url: str,
) -> None:
    app = kiln.App(store_url)
    ended: list[float] = []

    @app.job("polite")
    def polite(job: kiln.Job) -> None:
        job.cancelled.wait(20)  # the cooperative pattern: stop once kiln cancels
        time.sleep(0.3)  # ... after a little clean-up
        ended.append(time.monotonic())

    store = await open_store(store_url)
    try:
        job_id = await kiln.Client(store, app.kinds).enqueue("polite", {})
        cfg = config(shutdown_timeout=0.1, kill_grace=2.0, dead_after=8.0)
        server = app.server({"default": 1}, cfg)
        running = await Running(server).started()
        await wait_for(lambda: server.running_jobs == 1, 10, "the job to start")
        await running.stop()
        returned = time.monotonic()
        assert ended and ended[0] < returned, "run() returned while the handler still ran"
        row = await job_of(store, job_id)
        assert row.state is kiln.JobState.AVAILABLE and row.attempt == 0
        assert all(STILL_RUNNING not in e.error for e in row.errors), row.errors
        assert [e.outcome for e in running.finished()] == [kiln.Outcome.HANDED_BACK]
    finally:
        await store.close()


async def test_shutdown_waits_kill_grace_for_a_sync_handler_then_says_it_may_still_run(
    store_url: str,
) -> None:
    app = kiln.App(store_url)
    release = threading.Event()

    @app.job("deaf")
    def deaf(job: kiln.Job) -> None:
        release.wait(20)

    store = await open_store(store_url)
    try:
        job_id = await kiln.Client(store, app.kinds).enqueue("deaf", {})
        cfg = config(shutdown_timeout=0.1, kill_grace=0.6, dead_after=8.0)
        server = app.server({"default": 1}, cfg)
        running = await Running(server).started()
        await wait_for(lambda: server.running_jobs == 1, 10, "the job to start")
        took = await running.stop()
        assert 0.1 + 0.6 <= took < 0.1 + 0.6 + 2.0, took
        row = await job_of(store, job_id)
        assert row.state is kiln.JobState.AVAILABLE and row.attempt == 0
        assert STILL_RUNNING in row.errors[-1].error, row.errors
        assert [e.reason for e in running.of(kiln.events.HandlerStuck)] == ["shutdown"]
    finally:
        release.set()
        await store.close()


async def test_a_sync_handler_stuck_at_a_fence_keeps_its_slot_after_the_rejoin(
    store_url: str,
) -> None:
    """Server._fence (called directly: the heartbeat stays confirmed, so the pool claims
    again at once, as after a rejoin) waits kill_grace for the thread, then leaves the
    job to the rescuer; the stuck thread keeps the queue's only slot until it returns."""
    app = kiln.App(store_url)
    release = threading.Event()
    started: list[int] = []

    @app.job("deaf")
    def deaf(job: kiln.Job) -> None:
        started.append(job.id)
        release.wait(20)

    store = await open_store(store_url)
    try:
        client = kiln.Client(store, app.kinds)
        first = await client.enqueue("deaf", {})
        server = app.server({"default": 1}, config())
        running = await Running(server).started()
        try:
            await wait_for(lambda: started == [first], 10, "the first job to start")
            second = await client.enqueue("deaf", {})
            began = time.monotonic()
            await server._fence("test")
            assert time.monotonic() - began >= 0.2  # kill_grace, waited for the thread
            assert [(e.reason, e.thread) for e in running.of(kiln.events.HandlerStuck)] == [
                ("fenced", True)]
            await asyncio.sleep(0.5)
            assert started == [first], "a job started beside the stuck thread"
            health = server.healthy()
            assert not health and health.handlers_stuck, health
            release.set()
            await wait_for(lambda: second in started, 10, "the second job to start")
            await wait_for(lambda: bool(server.healthy()), 5, "health to come back")
            assert running.finished(first) == [], "the fenced attempt sent a result"
        finally:
            release.set()
            await running.stop()
    finally:
        await store.close()
