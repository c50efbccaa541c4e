"""Canceller: stops the handlers of running jobs that someone cancelled.

``client.cancel`` (the CLI, the dashboard) marks a running job cancelled in the
database at once, wherever it runs. This server learns of it two ways: a notification
(PostgreSQL's NOTIFY from the cancel itself, or a Bus message the client publishes)
pokes the canceller; without one, it looks every ``interval`` (heartbeat_interval)
while it runs jobs. Each look is one read by primary key of the jobs this server runs
(``jobs_cancel_requested``), and none at all while it runs nothing, so an idle server
costs the database no more than before.

For each of them cancelled under the same server and attempt, it asks the executor to
interrupt the handler (kiln._server._executor: an ``async def`` handler's task is cancelled, a
plain ``def`` handler sees ``job.cancelled``); the attempt then ends as cancelled and
uses no more attempts. It only compares and asks: it never writes, and never decides
an outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from kiln._errors import KilnError
from kiln._events import EventHub, StoreFailed
from kiln._model._job import JobRow
from kiln._server._executor import Executor
from kiln._server._pool import Pool
from kiln._server._service import LoopService
from kiln.stores import Store

log = logging.getLogger("kiln.canceller")


class Canceller(LoopService):
    name = "canceller"

    def __init__(
        self,
        *,
        store: Store,
        events: EventHub,
        executor: Executor,
        pools: Callable[[], Iterable[Pool]],
        interval: float,
    ) -> None:
        self._store = store
        self._events = events
        self._executor = executor
        self._pools = pools
        self.interval = interval
        self._poke = asyncio.Event()
        self.interrupted = 0
        self.looks = 0

    def poke(self) -> None:
        """A cancel notification: look now (it costs nothing while no job runs)."""
        self._poke.set()

    async def run_once(self) -> dict[str, int]:
        """One look: interrupt the handlers of this server's jobs that were cancelled,
        and make the attempts cancelled before their handler started end at once (a job
        claimed ahead, say, would otherwise start after the look and run in full)."""
        pools = list(self._pools())
        running: dict[int, tuple[asyncio.Task[Any] | None, JobRow]] = {
            row.id: (None, row) for pool in pools for row in pool.claimed_ahead()
        }
        running.update((row.id, (task, row)) for pool in pools
                       for task, row in pool.running.items())
        if not running:  # what an earlier look left for claimed rows goes with them
            return {}
        self.looks += 1
        try:
            requests = await self._store.jobs_cancel_requested(sorted(running))
        except (KilnError, OSError) as exc:
            self._events.emit(StoreFailed(operation="jobs_cancel_requested", error=exc))
            return {"errors": 1}
        now = time.monotonic()
        interrupted = 0
        early: dict[tuple[int, int], float] = {}
        for request in requests:
            task, row = running[request.id]
            if request.attempt != row.attempt or request.server_id != row.server_id:
                continue  # another attempt's cancel: this one was claimed since
            if task is not None and self._executor.request_cancel(task, now - request.age):
                interrupted += 1
                log.info("job %s (attempt %s) was cancelled %.3fs ago: stopping its handler",
                         row.id, row.attempt, request.age)
            elif task is None or not task.done():  # its handler has not started yet
                early[(row.id, row.attempt)] = now - request.age
        self._executor.cancelled_early = early
        self.interrupted += interrupted
        return {"interrupted": interrupted} if interrupted else {}

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._poke.wait()
            self._poke.clear()
            try:
                await self.run_once()
            except Exception:  # a bug here must not stop the next look
                log.exception("canceller failed; looking again in %.1fs", self.interval)
