"""Completer: buffers the results of attempts and writes them in batches.

Owns the results buffer and its writer task. A failed write keeps the results and
tries again with backoff (they are fenced, so writing one twice is harmless).
Backpressure: ``over_limit`` tells pools to stop claiming while the buffer is full.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable

from kiln._config import ServerConfig
from kiln._errors import KilnError
from kiln._events import EventHub, StoreFailed
from kiln._job import JobResult
from kiln.stores import Store

log = logging.getLogger("kiln.completer")


class Completer:
    def __init__(
        self,
        store: Store,
        config: ServerConfig,
        events: EventHub,
        on_released: Callable[[dict[str, int]], None],
        on_scheduled: Callable[[float], None] = lambda delay: None,
    ) -> None:
        self._store = store
        self._config = config
        self._events = events
        self._on_released = on_released
        self._on_scheduled = on_scheduled
        self._buffer: collections.deque[JobResult] = collections.deque()
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None
        self._inflight = 0
        self.written = 0
        self.failures = 0

    @property
    def pending(self) -> int:
        return len(self._buffer) + self._inflight

    @property
    def over_limit(self) -> bool:
        return self.pending >= self._config.results_max_pending

    async def wait_for_room(self) -> None:
        await self._room.wait()

    def push(self, result: JobResult) -> None:
        self._buffer.append(result)
        if len(self._buffer) >= self._config.results_batch:
            self._full.set()
        if self.over_limit:
            self._room.clear()
        self._wake.set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="kiln-completer")

    async def stop(self, timeout: float = 10.0) -> None:
        """Flush what is buffered (up to ``timeout``), then stop the writer."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.pending:
                    self._wake.set()
                    await asyncio.sleep(0.005)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None
        if self._buffer:
            log.warning("%d results could not be written; their jobs will be rescued",
                        len(self._buffer))

    async def _full_or(self, timeout: float) -> None:
        self._full.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._full.wait()

    async def _loop(self) -> None:
        delay = 0.0
        interval = float(self._config.results_flush_interval)
        while True:
            if not self._buffer:
                self._wake.clear()
                await self._wake.wait()
            if delay:
                await asyncio.sleep(delay)
            elif len(self._buffer) < self._config.results_batch:
                # gather what finishes in the next few ms: one round trip for all of it
                await self._full_or(interval)
            batch = [self._buffer.popleft() for _ in range(min(len(self._buffer),
                                                                 self._config.results_batch))]
            if not batch:
                continue
            self._inflight = len(batch)
            try:
                applied = await self._store.job_results_apply(batch)
            except (KilnError, OSError) as exc:
                self.failures += 1
                self._events.emit(StoreFailed(operation="job_results_apply", error=exc))
                self._buffer.extendleft(reversed(batch))
                delay = min(max(delay * 2, 0.05), 2.0)
                continue
            finally:
                self._inflight = 0
            delay = 0.0
            self.written += len(batch)
            if applied.released:
                self._on_released(applied.released)
            delays = [r.run_at_delay for r in batch if r.run_at_delay > 0]
            if delays:  # retries and snoozes: the releaser must look when they are due
                self._on_scheduled(min(delays))
            if not self.over_limit:
                self._room.set()
