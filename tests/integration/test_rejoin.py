"""After a rejoin, a server's error records name its new id, on every store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import kiln
from kiln.stores import store_from_url

FAST: dict[str, Any] = {"poll_interval": 0.1, "heartbeat_interval": 0.2, "kill_grace": 0.2,
                        "dead_after": 6, "leader_ttl": 1}


async def _until(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


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
        await _until(lambda: server.stats().state == "running", 10, "the server to start")
        first = server.id
        await other.server_deregister(first)  # swept while away: it fences, then rejoins
        await _until(lambda: server.id != first and server.healthy().ok, 10, "a rejoin")
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
