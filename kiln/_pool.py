"""Pool: claims jobs of one queue for the kinds this server handles, and runs them.

Owns the claim loop and the pool's running tasks. Claims in batches up to its free
slots; when the queue looked empty it waits for a wake-up (notification, released
jobs) or poll_interval. Does not write results: it hands them to the Completer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from kiln._completer import Completer
from kiln._errors import KilnError
from kiln._events import ClaimQueried, EventHub, JobClaimed, StoreFailed
from kiln._executor import Executor
from kiln._job import JobResult, JobRow, Outcome
from kiln.stores import Store

log = logging.getLogger("kiln.pool")
CLAIM_COOLDOWN = 0.002  # seconds a pool may wait for more free slots before claiming


class Pool:
    def __init__(
        self,
        queue: str,
        concurrency: int,
        kinds: Sequence[str],
        store: Store,
        executor: Executor,
        completer: Completer,
        events: EventHub,
        server_id: str,
        poll_interval: float,
        may_claim: Callable[[], bool],
    ) -> None:
        self.queue = queue
        self.concurrency = concurrency
        self._kinds = list(kinds)
        self._store = store
        self._executor = executor
        self._completer = completer
        self._events = events
        self.server_id = server_id
        self._poll_interval = poll_interval
        self._may_claim = may_claim
        self._wake = asyncio.Event()
        self._slot = asyncio.Event()
        self.running: dict[asyncio.Task[None], JobRow] = {}
        self._task: asyncio.Task[None] | None = None
        self._claiming = False
        self._in_claim = False
        self.claimed = 0
        self.claim_errors = 0

    def wake(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        if self._task is None:
            self._claiming = True
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name=f"kiln-pool-{self.queue}"
            )

    async def stop_claiming(self, claim_timeout: float = 5.0) -> None:
        """Stop the claim loop. A claim in flight is let finish (up to ``claim_timeout``):
        cancelling it after the database committed would strand its jobs as running
        under this server until a rescue."""
        self._claiming = False
        task, self._task = self._task, None
        if task is None:
            return
        if self._in_claim:
            self._wake.set()
            self._slot.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), claim_timeout)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _loop(self) -> None:
        error_delay = 0.0
        while self._claiming:
            free = self.concurrency - len(self.running)
            if free <= 0 or not self._may_claim():
                await self._wait(self._slot, self._poll_interval)
                continue
            if self._completer.over_limit:
                await self._completer.wait_for_room()
                continue
            self._wake.clear()
            claimed_as = self.server_id
            self._in_claim = True
            try:
                jobs = await self._claim(free)
            except (KilnError, OSError) as exc:
                self._in_claim = False
                self.claim_errors += 1
                self._events.emit(StoreFailed(operation="job_claim", error=exc))
                error_delay = min(max(error_delay * 2, 0.1), self._poll_interval * 5)
                await asyncio.sleep(error_delay)
                continue
            self._in_claim = False
            error_delay = 0.0
            if jobs and (
                self.server_id != claimed_as or not self._may_claim() or not self._claiming
            ):
                # a claim that hung while the server fenced itself (or rejoined under a new
                # id): its rows belong to a registration that is, or will be, judged dead
                self._hand_back(jobs)
                continue
            for row in jobs:
                self._spawn(row)
            if len(jobs) < free:
                await self._wait(self._wake, self._poll_interval)
            else:
                await self._gather_slots()

    async def _gather_slots(self) -> None:
        """After a full claim: wait for a free slot, then up to CLAIM_COOLDOWN for more.

        Claiming one job per freed slot would cost a round trip per job; waiting a
        moment lets short jobs finish together so the next claim takes a batch.
        """
        await self._wait(self._slot, self._poll_interval)
        deadline = time.monotonic() + CLAIM_COOLDOWN
        while len(self.running) > 0 and self._claiming:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await self._wait(self._slot, left)

    async def _wait(self, event: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
        event.clear()

    async def _claim(self, limit: int) -> list[JobRow]:
        began = time.monotonic()
        jobs = await self._store.job_claim(self.queue, self._kinds, limit, self.server_id)
        if self._events.active:
            self._events.emit(
                ClaimQueried(queue=self.queue, duration=time.monotonic() - began, claimed=len(jobs))
            )
            for row in jobs:
                latency = (row.attempted_at or row.run_at) - row.run_at
                self._events.emit(JobClaimed(job=row, latency=max(latency.total_seconds(), 0.0)))
        self.claimed += len(jobs)
        return jobs

    def _spawn(self, row: JobRow) -> None:
        task = asyncio.get_running_loop().create_task(self._run(row), name=f"kiln-job-{row.id}")
        self.running[task] = row

    async def _run(self, row: JobRow) -> None:
        try:
            result = await self._executor.run(row)
        except asyncio.CancelledError:
            # cancelled outside shutdown (fencing): the server decides what happens
            return
        except BaseException:  # a bug in kiln or a middleware: never lose the job
            log.exception("job %s crashed its executor; handing it back", row.id)
            result = JobResult(
                job_id=row.id, server_id=self.server_id, attempt=row.attempt,
                outcome=Outcome.HANDED_BACK,
            )
        finally:
            self.running.pop(asyncio.current_task(), None)  # type: ignore[arg-type]
            self._slot.set()
        self._completer.push(result)

    def _hand_back(self, rows: list[JobRow]) -> None:
        for row in rows:
            self._completer.push(JobResult(
                job_id=row.id, server_id=row.server_id or self.server_id, attempt=row.attempt,
                outcome=Outcome.HANDED_BACK,
            ))

    def cancel_running(self) -> None:
        for task in list(self.running):
            task.cancel(msg="kiln: server shutting down")

    def abandon(self) -> list[JobRow]:
        """Forget tasks that ignored cancellation; return their jobs to hand back."""
        rows = list(self.running.values())
        self.running.clear()
        return rows
