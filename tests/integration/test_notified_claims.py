"""An idle server on PostgreSQL takes notified jobs through its pools' ClaimWatches.

poll_interval is 30 s here, so every job that starts within the test's few seconds
was claimed on a notification: by a watch on the LISTEN connection, or by the pool
itself when a watch told it there might be more. Jobs enqueued one at a time, waited
for one by one, never need a claim of the pool's own; jobs enqueued back to back,
some while a watch's claim is in flight, all start too (no notification is lost
between a watch that took its jobs and the next one).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

import kiln
import kiln.events
from kiln._model._job import JobRow
from tests.plugins.databases import POSTGRES_URL, postgres_schema_url
from tests.support.config import fast_config

JOBS = 40


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A schema of its own, named by kiln's ``schema=`` setting so that its notifications
    go on a channel of its own (``kiln_<schema>``): on the shared ``kiln`` channel of a
    ``search_path`` schema, another test's enqueue in the same database woke this
    server's pools, whose claims this test counts (ci of 2026-12-07: 3 == 1; 1 run in 3
    failed beside the file's other tests on two workers, none alone)."""
    for url in postgres_schema_url():
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        options = query.pop("options", "")
        if options.startswith("-csearch_path="):
            query["schema"] = options.removeprefix("-csearch_path=")
        yield urlunsplit(parts._replace(query=urlencode(query)))


class Run:
    def __init__(self, server: kiln.Server, client: kiln.Client) -> None:
        self.server, self.client = server, client
        self.started: dict[int, float] = {}
        self.own_claims = 0
        self.notifier: list[bool] = []


@pytest.fixture
async def run(pg_url: str) -> AsyncIterator[Run]:
    app = kiln.App(pg_url)
    holder: list[Run] = []

    @app.job("tick", queue="ticks")
    async def tick(job: kiln.Job) -> None:
        holder[0].started[job.id] = time.monotonic()

    @app.job("checkpoint_at_once", queue="ticks")
    async def checkpoint_at_once(job: kiln.Job) -> None:
        await job.set_param("cursor", 1)  # before the claim's commit could have settled

    @app.job("sync_checkpoint_at_once", queue="ticks")
    def sync_checkpoint_at_once(job: kiln.Job) -> None:
        job.set_param_sync("cursor", 1)

    await app.amigrate()
    config = fast_config(poll_interval=30, shutdown_timeout=None)
    events = kiln.events.EventHub()
    server = app.server({"ticks": 4}, config, events=events)
    run = Run(server, app.client())
    holder.append(run)
    events.subscribe(lambda e: run.notifier.append(e.up)
                     if isinstance(e, kiln.events.NotifierChanged) else None)
    claim = server._store.job_claim

    async def counted(
        queue: str, kinds: Sequence[str], limit: int, server_id: str, limited: bool = False,
        keys: bool = True,
    ) -> list[JobRow]:
        run.own_claims += 1
        return await claim(queue, kinds, limit, server_id, limited, keys)

    server._store.job_claim = counted  # type: ignore[method-assign]
    task = asyncio.create_task(server.run())
    async with asyncio.timeout(10):
        while server.stats().state != "running":
            await asyncio.sleep(0.01)
    assert server.stats().notifications is True
    try:
        yield run
    finally:
        server.stop()
        await asyncio.wait_for(task, 20)
        await run.client._store.close()


async def started(run: Run, ids: Sequence[int], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not all(i in run.started for i in ids):
            await asyncio.sleep(0.002)


async def _settled(run: Run, quiet: float = 0.3) -> int:
    """The pool's own claims once none has come for ``quiet`` seconds (a loaded machine
    can take longer than a fixed sleep over the start-up claims)."""
    async with asyncio.timeout(10):
        while True:
            seen = run.own_claims
            await asyncio.sleep(quiet)
            if seen >= 1 and run.own_claims == seen:
                return seen


async def _armed(run: Run) -> None:
    """Until the pool watches again: a job starts before its watch's claim settles, and
    a notification that arrives before the next watch is armed wakes the pool, which then
    claims itself (rightly: the watch cannot have seen that job)."""
    session = run.server._pools["ticks"]._session
    async with asyncio.timeout(5):
        while not session.watching():
            await asyncio.sleep(0.001)


async def test_jobs_enqueued_one_at_a_time_start_without_a_claim_of_the_pools_own(
    run: Run,
) -> None:
    before = await _settled(run)  # past the start-up claims: the pool is idle and armed
    for i in range(JOBS):
        await _armed(run)
        job_id = await run.client.enqueue("tick", {"i": i})
        await started(run, [job_id])
    assert run.own_claims == before


async def test_jobs_enqueued_back_to_back_all_start(run: Run) -> None:
    await asyncio.sleep(0.1)
    began = time.monotonic()
    ids = [await run.client.enqueue("tick", {"i": i}) for i in range(JOBS)]
    await started(run, ids)
    assert max(run.started.values()) - began < 5  # long before any poll_interval



async def test_what_a_job_writes_at_once_waits_for_its_claims_commit(run: Run) -> None:
    """A watch's jobs start before their claim commits; a checkpoint or a result sent
    before that commit would not see the claim and be refused as fenced."""
    await asyncio.sleep(0.1)
    for i in range(10):
        for kind in ("checkpoint_at_once", "sync_checkpoint_at_once", "tick"):
            job_id = await run.client.enqueue(kind, {"i": i})
            async with asyncio.timeout(5):
                while (row := await run.client.get(job_id)) is None or not row.finished_at:
                    await asyncio.sleep(0.002)
            assert row.state is kiln.JobState.COMPLETED, (kind, row.errors)
            assert row.attempt == 1
            if kind != "tick":
                assert row.params == {"cursor": 1}


async def test_a_lost_listen_connection_is_reported_and_its_jobs_start_when_it_is_back(
    run: Run, pg_url: str
) -> None:
    """The server hears of it as from a Bus (NotifierChanged, kiln_notifier_up): the
    releaser falls back to its 100 ms check, and the pools look again once it is back."""
    assert run.notifier == [True]
    listener = run.server._store._listener  # type: ignore[attr-defined]
    pid = listener.backend_pid
    admin_url = POSTGRES_URL if "schema=" in pg_url else pg_url  # kiln's own parameter
    async with await psycopg.AsyncConnection.connect(admin_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    async with asyncio.timeout(5):
        while run.notifier[-1] is not False:
            await asyncio.sleep(0.005)
        assert run.server.stats().notifications is False
        while run.notifier[-1] is not True:
            await asyncio.sleep(0.005)
    assert run.notifier == [True, False, True] and listener.backend_pid != pid
    job_id = await run.client.enqueue("tick", {})
    await started(run, [job_id])
