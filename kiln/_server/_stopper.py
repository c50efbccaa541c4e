"""Stopper: how a server's running jobs end, on shutdown and on a fence.

Owns two sequences (design.md, "Server"):

- shutdown: stop claiming; stop the services; wait up to shutdown_timeout for running
  jobs (a forced stop ends the wait); cancel the rest with the shutdown error (they are
  handed back without using an attempt); wait kill_grace; hand back whatever still
  ignores cancellation; flush results; stop the heartbeat; deregister.
- fence: the heartbeat could not be confirmed for long enough, so others may rescue
  this server's jobs: cancel them, wait kill_grace, forget them. They write no result;
  the rescuer of a healthy server retries them. Claiming stops without it: the server's
  ``may_claim`` reads the heartbeat.

It builds and starts nothing; it writes results only through the completer, and to the
store only the deregistration.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence

from kiln._errors import KilnError, Shutdown
from kiln._events import EventHub, JobFinished, ServerStopping
from kiln._model._job import AttemptError, JobResult, JobRow, Outcome
from kiln._server._canceller import Canceller
from kiln._server._completer import Completer
from kiln._server._config import ServerConfig
from kiln._server._executor import Executor
from kiln._server._heartbeat import Heartbeater
from kiln._server._identity import Identity
from kiln._server._pool import Pool
from kiln._server._service import Service
from kiln.stores import Store

# beyond kill_grace, the time a task whose wait for its thread just ended needs to
# send its result: without it the server could hand the same job back a second time
SETTLE = 0.1


class Stopper:
    """Ends the running jobs of one server's ``pools`` (see the module docstring).

    ``pools`` is the server's own mapping; ``forced()`` says whether a forced stop
    (``stop(force=True)``, a second signal) came, and is read while waiting.
    """

    def __init__(
        self,
        *,
        store: Store,
        config: ServerConfig,
        events: EventHub,
        identity: Identity,
        pools: Mapping[str, Pool],
        executor: Executor,
        completer: Completer,
        forced: Callable[[], bool],
    ) -> None:
        self._store = store
        self._config = config
        self._events = events
        self._identity = identity
        self._pools = pools
        self._executor = executor
        self._completer = completer
        self._forced = forced

    async def shutdown(
        self,
        *,
        services: Sequence[Service],
        canceller: Canceller | None,
        heartbeat: Heartbeater | None,
    ) -> None:
        """The shutdown sequence; ``services``, ``canceller`` and ``heartbeat`` are those
        that were built (a failed start stops what it started)."""
        # every pool at once: each may wait up to its claim_timeout for a claim in flight
        await asyncio.gather(*(pool.stop_claiming() for pool in self._pools.values()))
        for service in reversed(services):
            await service.stop()
        tasks = self._running()
        if tasks and not self._forced():
            self._events.emit(ServerStopping(
                server_id=self._identity.id, timeout=float(self._config.shutdown_timeout),
                running=tuple(r for p in self._pools.values() for r in p.running.values())))
            await self._wait(tasks, float(self._config.shutdown_timeout), interruptible=True)
        if canceller is not None:
            await canceller.stop()
        self._executor.shutting_down = True
        tasks = self._running()
        if tasks:
            self._grant_grace()
            for pool in self._pools.values():
                pool.cancel_running()
            await self._wait(tasks, float(self._config.kill_grace) + SETTLE)
        for pool in self._pools.values():
            for row in pool.abandon():
                self._hand_back(row)
        await self._completer.stop(timeout=float(self._config.kill_grace) + 5.0)
        if heartbeat is not None:
            await heartbeat.stop()
            with contextlib.suppress(KilnError, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._store.server_deregister(self._identity.id)

    async def fence(self, reason: str) -> None:
        """Cancel running jobs, wait kill_grace, forget them (see the module docstring)."""
        tasks = self._running()
        self._grant_grace()
        for task in tasks:
            task.cancel(msg=f"kiln: fenced ({reason})")
        if tasks:
            await self._wait(tasks, float(self._config.kill_grace) + SETTLE)
        for pool in self._pools.values():
            pool.abandon()  # what still runs lingers, keeping its slot (see _lingering)
        self._executor.sync.grace_until = None

    def _running(self) -> list[asyncio.Task[None]]:
        return [t for p in self._pools.values() for t in p.running]

    async def _wait(
        self, tasks: list[asyncio.Task[None]], timeout: float, interruptible: bool = False
    ) -> None:
        """Wait for ``tasks`` up to ``timeout``; a forced stop interrupts the graceful wait."""
        deadline = time.monotonic() + timeout
        pending = {t for t in tasks if not t.done()}
        while pending and not (interruptible and self._forced()):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            _done, pending = await asyncio.wait(pending, timeout=min(left, 0.05))

    def _grant_grace(self) -> None:
        """The end of the kill_grace the server waits: threads are waited for until then."""
        loop = asyncio.get_running_loop()
        self._executor.sync.grace_until = loop.time() + float(self._config.kill_grace)

    def _hand_back(self, row: JobRow) -> None:
        """Hand back a job whose task ignored cancellation; it counts as any hand-back,
        and its record says that its handler may still be running."""
        server_id = self._identity.id
        error = Shutdown("its handler ignored the cancellation past kill_grace, and may "
                         "have gone on running after this record")
        self._events.emit(
            JobFinished(job=row, outcome=Outcome.HANDED_BACK, duration=0.0, error=error)
        )
        record = AttemptError(attempt=row.attempt, at=time.time(),
                              error=f"Shutdown: {error}", server_id=server_id)
        self._completer.push(
            JobResult(job_id=row.id, server_id=row.server_id or server_id, attempt=row.attempt,
                      outcome=Outcome.HANDED_BACK, error=record,
                      claimed_at=row.attempted_at)
        )
