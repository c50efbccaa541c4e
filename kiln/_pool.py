"""Pool: claims jobs of one queue for the kinds this server handles, and runs them.

Owns the claim loop, the pool's running tasks and its few claimed jobs waiting for a
slot. Claims in batches up to its free slots; when the queue looked empty it waits
for a wake-up (notification, released jobs) or poll_interval. Does not write results:
it hands them to the Completer.

Claiming ahead: while this pool's jobs are quick, it also claims more jobs than it has
free slots, so that the next batch is on its way while the current one runs; a
finishing job starts the next claimed one at once. It claims ahead only as many as its
slots get through in AHEAD_WAIT (20 ms) at the recent average duration, and never more
than (1 + AHEAD_MAX) x concurrency in all, so a job claimed ahead waits about 20 ms
at most. Long jobs switch this off (from concurrency x AHEAD_WAIT on average): then a
pool claims only for its free slots, and idle servers can take the rest. Should long
jobs take every slot while claimed jobs wait, no slot coming free for AHEAD_STALL
(100 ms), the waiting jobs are handed back (without using an attempt) and claiming
ahead stops until jobs finish again. On shutdown the jobs waiting for a
slot are handed back at once (they never started); on fencing they are dropped with
the running ones.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from kiln._completer import Completer
from kiln._errors import KilnError
from kiln._events import ClaimQueried, EventHub, JobClaimed, JobFinished, StoreFailed
from kiln._executor import Executor
from kiln._job import JobResult, JobRow, Outcome
from kiln.stores import Store

log = logging.getLogger("kiln.pool")
CLAIM_COOLDOWN = 0.002  # seconds a pool may wait for more free slots before claiming
AHEAD_WAIT = 0.02  # seconds a job claimed ahead may wait for its slot, on average
AHEAD_MAX = 8  # a pool holds at most (1 + AHEAD_MAX) x concurrency claimed jobs
AHEAD_STALL = 0.1  # seconds without a free slot after which waiting jobs are handed back
_SMOOTHING = 0.1  # weight of the latest duration in the running average


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
        self._ready: collections.deque[JobRow] = collections.deque()  # claimed, no slot yet
        self._average: float | None = None  # seconds a job of this pool takes, smoothed
        self._freed = time.monotonic()  # when a slot last came free
        self._task: asyncio.Task[None] | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._claiming = False
        self._in_claim = False
        self.claimed = 0
        self.claim_errors = 0

    def wake(self) -> None:
        self._wake.set()

    @property
    def waiting(self) -> int:
        """Claimed jobs waiting for a slot (claimed ahead)."""
        return len(self._ready)

    async def start(self) -> None:
        if self._task is None:
            self._claiming = True
            self._event_loop = asyncio.get_running_loop()
            self._task = self._event_loop.create_task(
                self._loop(), name=f"kiln-pool-{self.queue}"
            )

    async def stop_claiming(self, claim_timeout: float = 5.0) -> None:
        """Stop claiming; hand back the claimed jobs that have not started.

        A claim in flight is let finish (up to ``claim_timeout``): cancelling it after
        the database committed would strand its jobs as running under this server
        until a rescue."""
        self._claiming = False
        task, self._task = self._task, None
        if task is not None:
            if self._in_claim:
                self._wake.set()
                self._slot.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), claim_timeout)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        ready, self._ready = list(self._ready), collections.deque()
        self._hand_back(ready)

    def _ahead(self) -> int:
        """How many jobs beyond its slots this pool may hold: as many as its slots get
        through in AHEAD_WAIT at the recent average duration, at most AHEAD_MAX x
        concurrency (none until a job has finished, or when jobs are slow)."""
        average = self._average
        if average is None:
            return 0
        if average <= 0:
            return AHEAD_MAX * self.concurrency
        return min(AHEAD_MAX * self.concurrency, int(self.concurrency * AHEAD_WAIT / average))

    def _room(self) -> int:
        """How many jobs this pool may claim now."""
        return self.concurrency + self._ahead() - len(self.running) - len(self._ready)

    async def _loop(self) -> None:
        error_delay = 0.0
        while self._claiming:
            self._unstall()
            room = self._room()
            if room <= 0 or not self._may_claim():
                await self._wait(self._slot, self._patience())
                continue
            if self._completer.over_limit:
                await self._completer.wait_for_room()
                continue
            self._wake.clear()
            claimed_as = self.server_id
            self._in_claim = True
            try:
                jobs = await self._claim(room)
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
            if not self._ready:  # the stall clock starts when jobs begin to wait
                self._freed = time.monotonic()
            self._ready.extend(jobs)
            self._fill()
            if len(jobs) < room:
                await self._wait(self._wake, self._patience())
            else:
                await self._gather_slots()

    def _patience(self) -> float:
        """How long the loop may sleep: not past AHEAD_STALL while claimed jobs wait."""
        return min(self._poll_interval, AHEAD_STALL) if self._ready else self._poll_interval

    def _unstall(self) -> bool:
        """Hand back the jobs claimed ahead when no slot came free for AHEAD_STALL: jobs
        longer than the average hold every slot, and another server may be idle. Claiming
        ahead stops until this pool's jobs finish again. A fenced server writes nothing:
        its waiting jobs go with its running ones (see ``abandon``)."""
        if not self._ready or time.monotonic() - self._freed < AHEAD_STALL:
            return False
        if not self._may_claim():
            return False
        self._average = None
        ready, self._ready = list(self._ready), collections.deque()
        self._hand_back(ready)
        return True

    async def _gather_slots(self) -> None:
        """After a full claim: wait for room, then up to CLAIM_COOLDOWN for more.

        Claiming one job per freed slot would cost a round trip per job; waiting a
        moment lets short jobs finish together so the next claim takes a batch. A
        pool that claims ahead claims again once half of what it may hold has left,
        so that the next batch arrives while the claimed jobs still run.
        """
        ahead = self._ahead()
        if ahead:
            target = max(self.concurrency, (self.concurrency + ahead) // 2)
            while self._room() < target and self._claiming and not self._unstall():
                await self._wait(self._slot, self._patience())
            return
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
        events = self._events
        if events.wants(ClaimQueried):
            events.emit(
                ClaimQueried(queue=self.queue, duration=time.monotonic() - began, claimed=len(jobs))
            )
        if events.wants(JobClaimed):
            for row in jobs:
                latency = (row.attempted_at or row.run_at) - row.run_at
                events.emit(JobClaimed(job=row, latency=max(latency.total_seconds(), 0.0)))
        self.claimed += len(jobs)
        return jobs

    def _fill(self) -> None:
        """Start claimed jobs while there are free slots."""
        # the loop is passed around rather than looked up: on Python 3.11 every lookup
        # (get_running_loop, current_task without a loop) is a getpid() system call
        ready, running, loop = self._ready, self.running, self._event_loop
        assert loop is not None
        while ready and len(running) < self.concurrency:
            row = ready.popleft()
            running[loop.create_task(self._run(row), name=f"kiln-job-{row.id}")] = row

    async def _run(self, row: JobRow) -> None:
        began = time.monotonic()
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
            self.running.pop(asyncio.current_task(self._event_loop), None)  # type: ignore[arg-type]
            self._freed = ended = time.monotonic()
            if self._ready and self._claiming and self._may_claim():
                self._fill()
            self._slot.set()
        took = ended - began
        average = self._average
        self._average = took if average is None else average + (took - average) * _SMOOTHING
        self._completer.push(result)

    def _hand_back(self, rows: list[JobRow]) -> None:
        """Give back claimed jobs that never started; they count as handed back."""
        for row in rows:
            self._events.emit(JobFinished(job=row, outcome=Outcome.HANDED_BACK, duration=0.0))
            self._completer.push(JobResult(
                job_id=row.id, server_id=row.server_id or self.server_id, attempt=row.attempt,
                outcome=Outcome.HANDED_BACK,
            ))

    def cancel_running(self) -> None:
        for task in list(self.running):
            task.cancel(msg="kiln: server shutting down")

    def abandon(self) -> list[JobRow]:
        """Forget tasks that ignored cancellation, and the claimed jobs not yet started;
        return their jobs (the server hands them back, or leaves them to the rescuer)."""
        rows = [*self.running.values(), *self._ready]
        self.running.clear()
        self._ready.clear()
        return rows
