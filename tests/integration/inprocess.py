"""A server running in the test's own event loop, with its events recorded.

For tests that need to see inside a server (stats, health, events, a handler's
thread) while it runs against a real store; tests of what a worker process does use
tests/plugins/workers.py instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import kiln
import kiln.events
from kiln.stores import Store, store_from_url
from tests.support.config import fast, fast_config
from tests.support.waits import wait_for

T = TypeVar("T")
# an in-process server polls faster and shuts down sooner than tests.support.config's
FAST = fast(poll_interval=0.05, shutdown_timeout=0.3)


def config(**overrides: Any) -> kiln.ServerConfig:
    return fast_config(**{"poll_interval": 0.05, "shutdown_timeout": 0.3, **overrides})


class Running:
    """``server.run()`` as a task; ``events`` holds every event it emitted."""

    def __init__(self, server: kiln.Server) -> None:
        self.server = server
        self.events: list[kiln.events.Event] = []
        server.events.subscribe(self.events.append)
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(server.run())

    async def started(self) -> Running:
        def running() -> bool:
            if self.task.done():
                self.task.result()
            return bool(self.server.stats().state == "running")

        await wait_for(running, 10, "the server to run")
        return self

    def finished(self, job_id: int | None = None) -> list[kiln.events.JobFinished]:
        return [e for e in self.events if isinstance(e, kiln.events.JobFinished)
                and (job_id is None or e.job.id == job_id)]

    def of(self, cls: type[T]) -> list[T]:
        return [e for e in self.events if isinstance(e, cls)]

    async def stop(self, timeout: float = 20.0) -> float:
        """Stop the server; return how long run() took to return."""
        began = time.monotonic()
        self.server.stop()
        async with asyncio.timeout(timeout):
            await self.task
        return time.monotonic() - began


async def open_store(url: str) -> Store:
    store = store_from_url(url)
    await store.open()
    await store.migrate()
    return store


async def all_completed(get: Callable[[int], Awaitable[kiln.JobRow | None]],
                        ids: Iterable[int]) -> bool:
    """Whether every job of ``ids`` (read with ``get``: a store's job_get or a client's
    get) exists and completed."""
    rows = [await get(i) for i in ids]
    return all(r is not None and r.state is kiln.JobState.COMPLETED for r in rows)


async def job_of(store: Store, job_id: int) -> kiln.JobRow:
    row = await store.job_get(job_id)
    assert row is not None, f"job {job_id} is gone"
    return row
