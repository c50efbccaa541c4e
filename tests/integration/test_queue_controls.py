"""Queue controls inside one server: applied within one notification (LISTEN/NOTIFY, or
the Bus) long before poll_interval, obeyed from the start by a new server, and the
example of docs/operating.md ("In an incident") does what the page says."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import kiln
import kiln.events
from kiln._model._controls import FLEET
from tests.integration.inprocess import Running, config, open_store
from tests.support.docblocks import marked_block
from tests.support.waits import wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "operating.md"
SLOW_POLL = 30.0  # seconds: anything the server does sooner came from a notification


def _app(url: str, bus: kiln.Bus | None) -> kiln.App:
    app = kiln.App(url, bus=bus)

    @app.job("pay", queue="payments")
    async def pay(job: kiln.Job) -> None:
        await asyncio.sleep(float(job.args.get("seconds", 0)))

    @app.job("report", queue="reports")
    def report(job: kiln.Job) -> None:
        pass

    return app


async def test_a_change_reaches_the_server_within_one_notification(store_url: str) -> None:
    bus = kiln.InProcessBus()
    app = _app(store_url, bus)
    store = await open_store(store_url)
    running = await Running(app.server({"payments": 4, "reports": 2},
                                       config(poll_interval=SLOW_POLL))).started()
    client = kiln.Client(store, bus=bus)
    try:
        def payments() -> kiln.QueueStats:
            return running.server.stats().queues["payments"]

        loop = asyncio.get_running_loop()
        began = loop.time()
        await client.set_concurrency("payments", 1, actor="test")
        await wait_for(lambda: payments().concurrency == 1, 5, "the new concurrency")
        await client.pause_queue("payments", actor="test")
        await wait_for(lambda: payments().paused, 5, "the pause")
        assert loop.time() - began < 5 < SLOW_POLL
        assert running.server.stats().queues["payments"].concurrency == 1
        await client.set_concurrency("reports", 0, actor="test")  # claims nothing ...
        await wait_for(lambda: running.server.stats().queues["reports"].concurrency == 0, 5,
                       "concurrency 0")
        health = running.server.healthy()
        assert health.ok, health.reasons  # ... and is no stuck server
        job_id = await client.enqueue("pay", {}, queue="payments")
        await client.resume_queue("payments", actor="test")

        async def done() -> bool:
            row = await store.job_get(job_id)
            return row is not None and row.state is kiln.JobState.COMPLETED

        await wait_for(done, 5, "the job to run once resumed")
    finally:
        await running.stop()
        await store.close()


async def test_a_new_server_obeys_the_controls_from_its_first_claim(store_url: str) -> None:
    app = _app(store_url, None)
    store = await open_store(store_url)
    client = kiln.Client(store)
    await client.enqueue("pay", {}, queue="payments")  # makes payments a known queue
    await client.set_concurrency("payments", 2, actor="test")
    await client.enqueue("report", {}, queue="reports")
    await client.pause_queue("reports", actor="test")
    running = await Running(app.server({"payments": 8, "reports": 2}, config())).started()
    try:
        assert running.server.stats().queues["payments"].concurrency == 2
        assert running.server.stats().queues["reports"].paused
        await asyncio.sleep(0.3)  # several poll intervals: nothing is claimed
        assert not [e for e in running.of(kiln.events.JobClaimed) if e.job.queue == "reports"]
    finally:
        await running.stop()
        await store.close()


async def test_unknown_queues_and_bad_values_write_nothing(store_url: str) -> None:
    store = await open_store(store_url)
    client = kiln.Client(store)
    await client.enqueue("pay", {}, queue="payments")
    try:
        with pytest.raises(kiln.UnknownQueueError, match="unknown queue 'paymetns'"):
            await client.pause_queue("paymetns")
        with pytest.raises(kiln.UnknownQueueError):
            await client.set_concurrency("paymetns", 2)
        bad: Any
        for bad in (-1, 10_001, 2.5, True, "3"):
            with pytest.raises(kiln.ValidationError, match="concurrency must be"):
                await client.set_concurrency("payments", bad)
        with pytest.raises(kiln.ValidationError, match="not registered"):
            await client.set_concurrency("payments", 2, server="ghost")
        with pytest.raises(kiln.ValidationError, match="queue"):
            await client.pause_queue("")
        controls = await store.queue_controls()
        assert controls.pauses == () and controls.limits == ()
        assert await store.audit_list() == []
    finally:
        await store.close()


async def test_the_operating_docs_example(store_url: str, capsys: Any) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(marked_block(DOC, "queue-controls"), str(DOC), "exec"), namespace)
    store = await open_store(store_url)
    client = kiln.Client(store)
    await client.enqueue("pay", {}, queue="payments")
    await client.enqueue("report", {}, queue="reports")
    try:
        await namespace["incident"](client)
        printed = capsys.readouterr().out
        assert "payments paused" in printed and "reports active" in printed
        controls = await store.queue_controls()
        assert controls.pauses == () and controls.limits == ()
        actions = [(e.actor, e.action) for e in await store.audit_list()]
        assert actions == [("alice", "queue_concurrency"), ("alice", "queue_resume"),
                           ("alice", "queue_concurrency"), ("alice", "queue_pause")]
        assert FLEET == ""
    finally:
        await store.close()
