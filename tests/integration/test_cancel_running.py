"""Cancelling a running job stops its handler, on every store (a server in this process).

An ``async def`` handler's task is cancelled; a plain ``def`` handler sees
``job.cancelled`` set and returns (cooperative); one that ignores it is given up on
after kill_grace, keeps its slot, and its attempt counts as running (no requeue) until
it returns. Whatever the handler does then changes nothing: the job ends cancelled,
with the actor recorded, and uses no more attempts. Without notifications (SQLite,
MySQL without a Bus) the server learns of the cancel within one heartbeat_interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest

import kiln
import kiln.events
from tests.integration.inprocess import FAST, Running, config, job_of, open_store
from tests.support.waits import wait_for

HEARTBEAT = FAST["heartbeat_interval"]
SLACK = 0.5  # a 2-core machine, the database's commit


def app_of(url: str, started: dict[int, float], ended: dict[int, float]) -> kiln.App:
    app = kiln.App(url)

    @app.job("sleepy", max_attempts=5)
    async def sleepy(job: kiln.Job) -> None:
        started[job.id] = time.monotonic()
        try:
            await asyncio.sleep(30)
        finally:
            ended[job.id] = time.monotonic()

    @app.job("stubborn", max_attempts=5)
    async def stubborn(job: kiln.Job) -> str:
        started[job.id] = time.monotonic()
        with contextlib.suppress(asyncio.CancelledError):  # swallowed: it returns
            await asyncio.sleep(30)
        ended[job.id] = time.monotonic()
        return "done"

    @app.job("polite", max_attempts=5)
    def polite(job: kiln.Job) -> None:
        started[job.id] = time.monotonic()
        job.cancelled.wait(30)  # returns as soon as the job is cancelled
        ended[job.id] = time.monotonic()

    return app


async def _started(started: dict[int, float], job_id: int) -> None:
    await wait_for(lambda: job_id in started, 10, f"job {job_id} to start")


@pytest.mark.parametrize("kind", ["sleepy", "stubborn", "polite"])
async def test_a_cancel_stops_the_handler_and_the_job_ends_cancelled(
    store_url: str, kind: str
) -> None:
    started: dict[int, float] = {}
    ended: dict[int, float] = {}
    app = app_of(store_url, started, ended)
    store = await open_store(store_url)
    client = kiln.Client(store, app.kinds)
    try:
        running = await Running(app.server({"default": 2}, config())).started()
        try:
            job_id = await client.enqueue(kind, {})
            await _started(started, job_id)
            asked = time.monotonic()
            n = await client.cancel(kiln.filter_of(ids=[job_id]), actor="ops:alice")
            assert n == 1 and not n.finished and not n.missing
            await wait_for(lambda: job_id in ended, 5, "the handler to end")
            took = ended[job_id] - asked
            notified = store.capabilities.listen_notify
            assert took < (SLACK if notified else HEARTBEAT + SLACK), took
            [stopped] = await wait_for(lambda: running.of(kiln.events.JobCancelled), 5, "the event")
            assert stopped.job.id == job_id and not stopped.stuck
            assert 0 <= stopped.latency < HEARTBEAT + SLACK
            [finished] = running.finished(job_id)
            assert finished.outcome is kiln.Outcome.CANCELLED
            assert running.server.stats().completed == 0
        finally:
            await running.stop()
        row = await job_of(store, job_id)
        assert row.state is kiln.JobState.CANCELLED and row.attempt == 1
        assert [e.error for e in row.errors] == ["Cancelled by ops:alice"]
        # the late (fenced) result ended the attempt: the job may be requeued at once
        assert await client.requeue(kiln.filter_of(ids=[job_id])) == 1
    finally:
        await store.close()


async def test_a_def_handler_that_ignores_the_cancel_keeps_its_attempt_running(
    store_url: str,
) -> None:
    release = threading.Event()
    app = kiln.App(store_url)
    began = threading.Event()

    @app.job("deaf", max_attempts=5)
    def deaf(job: kiln.Job) -> str:
        began.set()
        release.wait(30)  # never looks at job.cancelled
        return "late"

    store = await open_store(store_url)
    client = kiln.Client(store, app.kinds)
    try:
        running = await Running(app.server({"default": 1}, config())).started()
        try:
            job_id = await client.enqueue("deaf", {})
            await wait_for(began.is_set, 10, "the handler to start")
            await client.cancel(kiln.filter_of(ids=[job_id]))
            [stopped] = await wait_for(lambda: running.of(kiln.events.JobCancelled), 5, "the event")
            assert stopped.stuck  # kiln gave up after kill_grace
            [stuck] = running.of(kiln.events.HandlerStuck)
            assert stuck.reason == "cancelled"
            assert running.server.stats().handlers_stuck == 1
            # its thread may still do anything: the job must not run again meanwhile
            assert await client.requeue(kiln.filter_of(ids=[job_id])) == 0
            release.set()
            await wait_for(lambda: running.server.stats().handlers_stuck == 0, 5,
                           "the thread to return")

            async def requeued() -> bool:
                return await client.requeue(kiln.filter_of(ids=[job_id])) == 1

            await wait_for(requeued, 5, "the late result to end the attempt")
        finally:
            release.set()
            await running.stop()
    finally:
        await store.close()


async def test_cancel_reports_finished_and_unknown_jobs(store_url: str) -> None:
    started: dict[int, float] = {}
    app = app_of(store_url, started, {})
    store = await open_store(store_url)
    client = kiln.Client(store, app.kinds)
    try:
        done_id, open_id = await client.enqueue("sleepy", {}), await client.enqueue("sleepy", {})
        assert await client.cancel(kiln.filter_of(ids=[done_id])) == 1
        result = await client.cancel(kiln.filter_of(ids=[done_id, open_id, 10**9]))
        assert result == 1
        assert result.finished == {done_id: kiln.JobState.CANCELLED}
        assert result.missing == (10**9,)
        with pytest.raises(kiln.JobFinishedError, match=f"job {done_id} has finished"):
            await client.cancel_job(done_id)
        with pytest.raises(kiln.JobNotFoundError, match="not found"):
            await client.cancel_job(10**9)
        audits = await store.audit_list()
        assert len(audits) == 2  # the refused single-id cancels wrote nothing
    finally:
        await store.close()


async def test_the_canceller_keeps_the_lifecycle_contract_and_costs_nothing_idle(
    store_url: str,
) -> None:
    from kiln._server._canceller import Canceller

    store = await open_store(store_url)
    try:
        executor: Any = None  # never asked: no pool runs anything
        canceller = Canceller(store=store, events=kiln.events.EventHub(), executor=executor,
                              pools=lambda: [], interval=0.01)
        await canceller.stop()  # safe before start
        await canceller.start()
        await canceller.start()  # idempotent
        before = store.query_count()
        canceller.poke()
        await asyncio.sleep(0.1)  # ten looks
        assert store.query_count() == before  # nothing runs here: no query
        assert await canceller.run_once() == {} and canceller.looks == 0
        await canceller.stop()
        await canceller.stop()
    finally:
        await store.close()
