"""The lifecycle every background service shares, and a loop for periodic ones.

Contract: ``start()`` returns once the service runs; ``stop()`` is idempotent and safe
before ``start()``. A periodic service implements ``run_once()`` (one bounded pass,
returns counts; tests call it directly) and inherits the loop: sleep with jitter,
check that it may run, call it, emit the result, survive an exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Protocol

from kiln._aio._tasks import stop_task
from kiln._errors import StoreError
from kiln._events import EventHub, MaintenanceRan, StoreFailed

log = logging.getLogger("kiln.service")


class Service(Protocol):
    name: str

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class LoopService:
    """A service that is one named task running ``_loop`` (task name ``kiln-{name}``)."""

    name = "service"
    _task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name=f"kiln-{self.name}"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)


class PeriodicService(LoopService):
    """Base of a service that calls ``run_once`` every ``interval`` seconds (±10% jitter)."""

    def __init__(self, interval: float, events: EventHub | None = None) -> None:
        self.interval = interval
        self.events = events
        self._wake = asyncio.Event()
        self.errors = 0

    async def run_once(self) -> dict[str, int]:
        raise NotImplementedError

    def may_run(self) -> bool:
        return True

    def first_delay(self) -> float:
        return 0.0

    def next_delay(self, counts: dict[str, int]) -> float:
        return self.interval * random.uniform(0.9, 1.1)

    def wake(self) -> None:
        self._wake.set()

    async def _sleep(self, delay: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()
        self._wake.clear()

    async def _loop(self) -> None:
        await self._sleep(self.first_delay())
        while True:
            counts: dict[str, int] = {}
            if self.may_run():
                try:
                    counts = await self.run_once()
                except Exception as exc:
                    self.errors += 1
                    log.exception("%s failed; trying again next round", self.name)
                    if isinstance(exc, StoreError) and self.events is not None:
                        self.events.emit(StoreFailed(operation=exc.operation, error=exc))
                    counts = {"errors": 1}
                if self.events is not None and any(counts.values()):
                    self.events.emit(MaintenanceRan(service=self.name, counts=counts))
            await self._sleep(self.next_delay(counts))
