"""A start that fails part way stops every service it started, on every store.

The notifications come up after the completer and the heartbeat are running: make them
fail (the LISTEN connection, or the Bus, as when the database or Redis goes away just
then), and ``run()`` must raise with no kiln task left behind and the registration gone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

import kiln
from kiln.stores import store_from_url
from tests.support.config import fast

FAST = fast(poll_interval=0.1, shutdown_timeout=None)


class DownBus(kiln.InProcessBus):
    name = "down"

    async def subscribe(self, callback: Callable[[str, str], None]) -> None:
        raise OSError("bus unreachable")


async def _refuse(callback: object) -> None:
    raise kiln.UnreachableError("listen", "LISTEN connection refused")


def _kiln_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks()
            if t is not asyncio.current_task() and not t.done()]


async def test_a_failed_start_leaves_no_task_running(store_url: str) -> None:
    app = kiln.App(store_url, bus=DownBus())

    @app.job("noop")
    async def noop(job: kiln.Job) -> None:
        return None

    await app.amigrate()
    server = app.server({"default": 1}, kiln.ServerConfig(**FAST))
    if server._store.capabilities.listen_notify:
        server._store.listen = _refuse  # type: ignore[method-assign]
    before = set(_kiln_tasks())
    with pytest.raises((OSError, kiln.UnreachableError)):
        await asyncio.wait_for(server.run(), 30)
    left = [t for t in _kiln_tasks() if t not in before]
    assert left == [], [t.get_name() for t in left]
    assert server.stats().state == "stopped"
    other = store_from_url(store_url)
    await other.open()
    try:
        assert [s.id for s in await other.server_list()] == []  # deregistered
    finally:
        await other.close()
        await app.aclose()
