"""After a rejoin, a server's error records name its new id, on every store."""

from __future__ import annotations

import asyncio
import time

import kiln
import kiln.events
from kiln.stores import store_from_url
from tests.support.config import fast
from tests.support.waits import wait_for

FAST = fast(poll_interval=0.1, shutdown_timeout=None)


async def test_error_records_name_the_id_the_server_rejoined_under(store_url: str) -> None:
    app = kiln.App(store_url, bus=kiln.InProcessBus())

    @app.job("boom", max_attempts=1)
    async def boom(job: kiln.Job) -> None:
        raise RuntimeError("boom")

    await app.amigrate()
    server = app.server({"default": 1}, kiln.ServerConfig(**FAST))
    task = asyncio.create_task(server.run())
    other = store_from_url(store_url)
    await other.open()
    try:
        await wait_for(lambda: server.stats().state == "running", 10, "the server to start")
        first = server.id
        await other.server_deregister(first)  # swept while away: it fences, then rejoins
        await wait_for(lambda: server.id != first and server.healthy().ok, 10, "a rejoin")
        job_id = await app.aenqueue("boom", {})
        row: kiln.JobRow | None = None
        deadline = time.monotonic() + 10
        while row is None or row.state is not kiln.JobState.FAILED:
            assert time.monotonic() < deadline, f"job still {row and row.state}"
            await asyncio.sleep(0.05)
            row = await other.job_get(job_id)
        assert [e.server_id for e in row.errors] == [server.id]
        assert row.server_id == server.id != first
    finally:
        server.stop()
        await task
        await other.close()
        await app.aclose()


async def test_every_part_of_a_server_names_the_id_it_rejoined_under(store_url: str) -> None:
    """The id lived in four copies (the server's info, the heartbeat's, the executor's,
    each pool's), refreshed by hand on a rejoin; now every part holds one Identity."""
    app = kiln.App(store_url, bus=kiln.InProcessBus())

    @app.job("noop")
    async def noop(job: kiln.Job) -> None:
        return None

    await app.amigrate()
    server = app.server({"default": 1, "other": 1}, kiln.ServerConfig(**FAST))
    beats: list[str] = []
    server.events.subscribe(lambda e: beats.append(e.server_id), types=(kiln.events.Heartbeat,))
    task = asyncio.create_task(server.run())
    other = store_from_url(store_url)
    await other.open()
    try:
        await wait_for(lambda: server.stats().state == "running", 10, "the server to start")
        first = server.id
        await other.server_deregister(first)
        await wait_for(lambda: server.id != first and server.healthy().ok, 10, "a rejoin")
        new = server.id
        assert server.info.id == new  # the registration it reports
        assert server.stats().server_id == new
        assert [s.id for s in await other.server_list()] == [new]
        job_id = await app.aenqueue("noop", {})
        await wait_for(lambda: beats and beats[-1] == new, 5, "a heartbeat under the new id")
        row = await other.job_get(job_id)
        deadline = time.monotonic() + 10
        while row is None or row.state is not kiln.JobState.COMPLETED:
            assert time.monotonic() < deadline, f"job still {row and row.state}"
            await asyncio.sleep(0.05)
            row = await other.job_get(job_id)
        assert row.server_id == new  # claimed by a pool under the new id
        # every part holds the one identity the rejoin changed, not a copy of the id
        from kiln._server._reconciler import Reconciler

        reconciler = next(s for s in server._services if isinstance(s, Reconciler))
        holders = {
            "executor": server._executor._identity,
            "heartbeat": server._heartbeat._identity if server._heartbeat else None,
            "elector": server._elector._identity if server._elector else None,
            "governor": server._governor._identity if server._governor else None,
            "reconciler": reconciler._identity,
            "context": server._context().identity,
            **{f"pool {q}": p._identity for q, p in server._pools.items()},
        }
        assert {part: h and h.id for part, h in holders.items()} == dict.fromkeys(holders, new)
        assert all(h is server._identity for h in holders.values())
    finally:
        server.stop()
        await task
        await other.close()
        await app.aclose()
