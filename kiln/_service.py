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
from typing import Any, Protocol

from kiln._events import EventHub, MaintenanceRan

log = logging.getLogger("kiln.service")


class Service(Protocol):
    name: str

    async def start(self) -> None: ...
    async def stop(self) -> None: ...


# How long a stop waits for a cancelled task, twice. A task in a database call may not
# end at the first cancel: psycopg then asks the server to cancel the query, over a new
# connection, and waits up to 5 s + 5 s, or a pool wait runs to its timeout, which an
# unreachable database never cuts short. The second cancel interrupts that (psycopg
# closes the connection); a task still running after it is left behind, so that a stop
# never waits on the database (what it held is rescued like any stranded claim).
STOP_WAIT = 0.5


async def stop_task(task: asyncio.Task[Any] | None, wait: float = STOP_WAIT) -> None:
    """Cancel ``task`` and wait until it has finished (None is fine), at most about
    2 x ``wait``: a task that outlives a second cancel is left behind, with a warning."""
    if task is None:
        return
    for _round in range(2):
        task.cancel()
        done, _pending = await asyncio.wait({task}, timeout=wait)
        if done:
            if not task.cancelled():
                task.result()  # its exception, as awaiting it would raise
            return
    log.warning("task %s still runs %.1fs after it was cancelled twice; left behind",
                task.get_name(), 2 * wait)


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
                except Exception:
                    self.errors += 1
                    log.exception("%s failed; trying again next round", self.name)
                    counts = {"errors": 1}
                if self.events is not None and any(counts.values()):
                    self.events.emit(MaintenanceRan(service=self.name, counts=counts))
            await self._sleep(self.next_delay(counts))
