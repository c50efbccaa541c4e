"""Buses carry wake-ups between processes for stores without LISTEN/NOTIFY.

A message is (channel, payload), as kiln._model._wakeup spells them: the same protocol a
PostgreSQL store sends with NOTIFY. A bus tells its subscribers about its own
connection on channel ``STATE``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from kiln._model._wakeup import CHANNEL

BusCallback = Callable[[str, str], None]


@runtime_checkable
class Bus(Protocol):
    """Carries wake-ups (jobs enqueued, queue controls changed, cancels) between
    processes for stores without LISTEN/NOTIFY (SQLite, MariaDB): ``publish`` a payload,
    ``subscribe`` a callback. ``InProcessBus`` for one process, ``RedisBus`` for a
    fleet; without a bus, servers find new work within ``poll_interval``.
    """

    name: str

    async def publish(self, payload: str) -> None: ...
    def publish_sync(self, payload: str) -> None: ...
    async def subscribe(self, callback: BusCallback) -> None: ...
    async def unsubscribe(self, callback: BusCallback) -> None: ...
    def connected(self) -> bool: ...
    async def close(self) -> None: ...


class InProcessBus:
    """Delivers to subscribers in this process only (one process, several loops)."""

    name = "inprocess"

    def __init__(self) -> None:
        self._subscribers: list[tuple[BusCallback, asyncio.AbstractEventLoop]] = []

    async def publish(self, payload: str) -> None:
        self.publish_sync(payload)

    def publish_sync(self, payload: str) -> None:
        for callback, loop in list(self._subscribers):
            if not loop.is_closed():
                loop.call_soon_threadsafe(callback, CHANNEL, payload)

    async def subscribe(self, callback: BusCallback) -> None:
        self._subscribers.append((callback, asyncio.get_running_loop()))

    async def unsubscribe(self, callback: BusCallback) -> None:
        self._subscribers = [(c, lp) for c, lp in self._subscribers if c is not callback]

    def connected(self) -> bool:
        return True

    async def close(self) -> None:
        self._subscribers.clear()
