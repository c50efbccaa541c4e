"""Fixtures for the results path: a server in the test's own event loop, on each store.

``serve`` starts ``app.server(...)`` with short intervals (heartbeat 0.2 s, dead_after
6 s) and stops it at the end of the test; the test enqueues and inspects through the
app's client.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

import kiln
from tests.support.config import fast_config
from tests.support.results import Serve


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    running: list[tuple[kiln.Server, asyncio.Task[None]]] = []

    async def start(
        app: kiln.App, queues: dict[str, int], store: Any = None, **config: Any
    ) -> kiln.Server:
        await app.amigrate()
        cfg = fast_config(**{"poll_interval": 0.05, **config})
        server = app.server(queues, cfg) if store is None else kiln.Server(
            store, app.kinds, queues, cfg)
        task = asyncio.create_task(server.run())
        running.append((server, task))
        async with asyncio.timeout(10):
            while server.stats().state != "running":
                assert not task.done(), task.exception()
                await asyncio.sleep(0.01)
        return server

    yield start
    for server, task in running:
        server.stop(force=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 20)
