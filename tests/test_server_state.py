"""Server.state: the lifecycle stats() reports, read without building a snapshot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import kiln
from tests.support.config import fast_config

FAST = fast_config(leader_ttl=None)


async def test_state_follows_the_lifecycle(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path / 'k.db'}")
    app.register("noop", lambda job: None)
    await app.amigrate()
    server = app.server({"default": 1}, FAST)
    seen = [server.state]
    assert server.stats().state == "new"
    task = asyncio.create_task(server.run())
    async with asyncio.timeout(30):
        while server.state != "running":
            await asyncio.sleep(0.01)
    seen.append(server.state)
    assert server.stats().state == "running"
    server.stop()
    await asyncio.wait_for(task, 30)
    seen.append(server.state)
    assert server.stats().state == "stopped"
    assert seen == ["new", "running", "stopped"]
    await app.aclose()
