"""A store wrapper that cuts one process off from its database, for SQLite.

SQLite has no network to partition, and blocking the file (a lock, chmod) would cut
every process off at once, leaving no healthy server to do the rescuing. So the gate
sits at the store boundary of one worker process: while closed, every store call from
that process waits, as it would behind a network that stopped forwarding; calls
already running finish. When the gate opens, the waiting calls go through, late,
exactly as queued packets would. Callers that gave up waiting (the heartbeat's
timeout) have been cancelled and send nothing.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any


class GatedStore:
    def __init__(self, store: Any) -> None:
        self._store = store
        self._open = asyncio.Event()
        self._open.set()

    def cut(self) -> None:
        self._open.clear()

    def restore(self) -> None:
        self._open.set()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not inspect.iscoroutinefunction(value):
            return value

        @functools.wraps(value)
        async def gated(*args: Any, **kwargs: Any) -> Any:
            await self._open.wait()
            return await value(*args, **kwargs)

        return gated
