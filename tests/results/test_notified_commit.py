"""A claim on a notification whose COMMIT takes longer than the watch's close timeout
(5 s) never releases its jobs' results before the commit settles (issue 22, defect 3).

PostgreSQL only (sqlite, mysql: no claims on notifications). The server's store
connects through the loopback proxy, which holds the LISTEN connection's COMMIT for
7 s. Before the fix the gate opened after 5 s, the result was written before the
claim committed and applied nothing, and the job stayed running (here the
reconciler would write it again later: the test requires it applied the first time).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

import kiln
import kiln.events
from kiln import JobState
from kiln.stores import store_from_url
from tests.plugins.databases import postgres_schema_url
from tests.support.results import Serve, proxied
from tests.support.waits import wait_for

HOLD = 7.0  # longer than Watch.close's 5 s


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from postgres_schema_url()


async def test_results_wait_for_a_slow_commit_of_a_notified_claim(
    pg_url: str, serve: Serve
) -> None:
    proxy, url = await proxied(pg_url)
    started: dict[int, float] = {}
    app = kiln.App(pg_url)

    @app.job("tick", queue="ticks")
    async def tick(job: kiln.Job) -> None:
        started[job.id] = time.monotonic()

    server = await serve(app, {"ticks": 2}, store=store_from_url(url), poll_interval=30)
    assert server.stats().notifications is True
    reconciled: list[kiln.events.JobReconciled] = []
    server.events.subscribe(reconciled.append, types=[kiln.events.JobReconciled])
    await asyncio.sleep(0.3)  # idle: the pool's watch is armed on the LISTEN connection
    proxy.hold(lambda data: b"COMMIT" in data, HOLD)
    began = time.monotonic()
    job_id = await app.client().enqueue("tick", {})

    async def done() -> bool:
        row = await app.client().get(job_id)
        return row is not None and row.state is JobState.COMPLETED

    await wait_for(done, HOLD + 6, "completed once its claim committed")
    assert started[job_id] - began < 2, "a notified job starts before its commit"
    assert time.monotonic() - began >= HOLD - 0.5, "its result waited for the commit"
    row = await app.client().get(job_id)
    assert row is not None and row.attempt == 1
    stats = server.stats()
    assert stats.results_unapplied == 0, "the result was written before the commit"
    assert reconciled == []
    assert server.healthy(), server.healthy().reasons
    await proxy.cut()
    await app.aclose()
