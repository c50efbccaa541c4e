"""Pool: claims jobs of one queue for the kinds this server handles, and runs them.

Owns the claim loop, the pool's running tasks and its few claimed jobs waiting for a
slot. Claims in batches up to its free slots; when the queue looked empty it waits
for a wake-up (notification, released jobs) or poll_interval. Does not write results:
it hands them to the Completer.

Its parts: ``ClaimAhead`` (kiln._server._claim_ahead) decides how many jobs to claim,
from the slots and the jobs' recent pace, and when jobs claimed ahead waited too long;
``ClaimSession`` (kiln._server._claim_session) makes the claims, the pool's own and a
store ClaimWatch's on a notification, with their explicit states and commit gates.
What is left here is the loop that asks one and calls the other, and the running jobs.

On shutdown the jobs waiting for a slot are handed back at once (they never started);
on fencing they are dropped with the running ones.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from kiln._aio._tasks import stop_task
from kiln._errors import KilnError
from kiln._events import EventHub, HandlerStuck, JobFinished
from kiln._model._job import JobResult, JobRow, Outcome
from kiln._server._claim_ahead import ClaimAhead
from kiln._server._claim_session import ClaimSession, ClaimState
from kiln._server._completer import Completer
from kiln._server._executor import Executor
from kiln._server._identity import Identity
from kiln._server._lingering import Lingering
from kiln.stores import Store

log = logging.getLogger("kiln.pool")
CLAIM_COOLDOWN = 0.002  # seconds a pool may wait for more free slots before claiming


class Pool:
    def __init__(
        self,
        *,
        queue: str,
        concurrency: int,
        kinds: Sequence[str],
        store: Store,
        executor: Executor,
        completer: Completer,
        events: EventHub,
        identity: Identity,
        poll_interval: float,
        may_claim: Callable[[], bool],
        limited: bool = False,
        keys: bool = True,
        misfiled: Callable[[JobRow], tuple[str, int] | None] | None = None,
    ) -> None:
        self.queue = queue
        # the queue may hold jobs under a global concurrency limit (kiln._model._concurrency):
        # they are claimed under their key's lock, never on a notification's watch (it
        # claims plain jobs only), and never ahead of a free slot (a job held ahead
        # would take one of the key's slots without running)
        self.limited = limited
        # limited, but none of the kinds has a limit of its own: only the queue's counts
        self.keys = keys
        # a limited job claimed under a key its declaration no longer gives: the key and
        # its max, to rekey it and hand it back instead of running it (kiln._server._misfiled)
        self._misfiled = misfiled if limited else None
        self._store = store
        self.concurrency = concurrency
        self._executor = executor
        self._completer = completer
        self._events = events
        self._identity = identity  # read at each claim: a rejoin changes it
        self._poll_interval = poll_interval
        self._may_claim = may_claim
        self._wake = asyncio.Event()
        self._slot = asyncio.Event()
        self.running: dict[asyncio.Task[None], JobRow] = {}
        self.lingering = Lingering(self._lingered)  # given up on, still running: slots taken
        self._ready: collections.deque[JobRow] = collections.deque()  # claimed, no slot yet
        # limited jobs whose result waits for their stuck handler's thread to end
        self._ending: set[int] = set()
        self._policy = ClaimAhead()  # how many to claim (kiln._server._claim_ahead)
        self._freed = time.monotonic()  # when a slot last came free
        self._task: asyncio.Task[None] | None = None
        self._event_loop: asyncio.AbstractEventLoop | None = None
        self._claiming = False  # started, and not stopping
        self._woken = False  # a local wake-up since the last claim
        self.paused = False  # by a queue control (kiln._server._governor): claims nothing
        self._session = ClaimSession(
            queue=queue, kinds=kinds, store=store, events=events, identity=identity,
            limited=limited, keys=keys,
            accept=self._accept,
            hand_back=self._hand_back, roll_back=self._roll_back, on_taken=self._wake.set,
        )
        self._gates = self._session.gates  # job id -> the gate its writes wait behind

    def set_paused(self, paused: bool) -> None:
        """Paused: claim nothing more and hand back the jobs claimed ahead (they never
        started); running jobs finish. Resumed: claim at once."""
        self.paused = paused
        if paused:
            ready, self._ready = list(self._ready), collections.deque()
            self._hand_back(ready)
        self._slot.set()
        self.wake()

    def set_concurrency(self, concurrency: int) -> None:
        """A new limit, at once: lowered, running jobs finish and only new claims wait
        (jobs claimed ahead beyond it go back after AHEAD_STALL, and claiming ahead
        stops until jobs finish again); raised, the claimed jobs start and the pool
        claims for the new slots."""
        if concurrency < self.concurrency:
            self._policy.forget()
        self.concurrency = concurrency
        if self._event_loop is not None and not self.paused and self._may_claim():
            self._fill()
        self._slot.set()
        self.wake()

    def wake(self) -> None:
        """There may be jobs: released here, the notifier came back, a rejoin."""
        self._woken = True
        self._wake.set()

    def notified(self) -> None:
        """A notification for this queue: an armed watch claims on it in the store."""
        if not self._session.watching():
            self.wake()

    @property
    def claimed(self) -> int:
        return self._session.claimed

    @property
    def claim_errors(self) -> int:
        return self._session.claim_errors

    @property
    def waiting(self) -> int:
        """Claimed jobs waiting for a slot (claimed ahead)."""
        return len(self._ready)

    def claimed_ahead(self) -> list[JobRow]:
        """The rows of the jobs claimed and waiting for a slot (their handlers have not
        started)."""
        return list(self._ready)

    def held(self) -> set[int]:
        """Ids of the jobs this pool holds: running, waiting for a slot or for their
        claim to settle, or taken by the claim in flight (for the reconciler)."""
        return {*(r.id for r in self.running.values()), *(r.id for r in self._ready),
                *self._ending, *self._session.held()}

    def claim_age(self) -> float | None:
        """Seconds the pool's own claim has been in flight, None when there is none."""
        return self._session.claim_age()

    async def settled(self, job_id: int) -> None:
        """Return once the claim of ``job_id`` has settled (see ClaimSession.settled)."""
        await self._session.settled(job_id)

    async def start(self) -> None:
        if self._task is None:
            self._claiming = True
            self._event_loop = asyncio.get_running_loop()
            self._task = self._event_loop.create_task(
                self._loop(), name=f"kiln-pool-{self.queue}"
            )

    async def stop_claiming(self, claim_timeout: float = 2.0) -> None:
        """Stop claiming; hand back the claimed jobs that have not started.

        A claim in flight is let finish (up to ``claim_timeout``): cancelling it after
        the database committed would strand its jobs as running under this server
        until a rescue, which is what becomes of them when the database does not answer
        within ``claim_timeout`` (then it cannot take the hand-back either)."""
        self._claiming = False
        task, self._task = self._task, None
        if task is not None:
            if self._session.state is ClaimState.CLAIMING:
                self._wake.set()
                self._slot.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(task), claim_timeout)
            await stop_task(task)
        ready, self._ready = list(self._ready), collections.deque()
        self._hand_back(ready)

    def _room(self) -> int:
        """How many jobs this pool may claim now."""
        held = len(self.running) + len(self._ready) + len(self.lingering)
        return self._policy.room(self.concurrency, held)

    async def _loop(self) -> None:
        error_delay = 0.0
        claim_now = True
        while self._claiming:
            self._unstall()
            room = self._room()
            if room <= 0 or self.paused or not self._may_claim():
                await self._wait(self._slot, self._patience())
                continue
            if self._completer.over_limit:
                await self._completer.wait_for_room()
                continue
            if not claim_now:
                claim_now = await self._idle(room)
                continue
            self._wake.clear()
            self._woken = False
            try:
                jobs = await self._session.claim(room)
            except (KilnError, OSError) as exc:
                self._session.failed(exc)
                error_delay = min(max(error_delay * 2, 0.1), self._poll_interval * 5)
                await asyncio.sleep(error_delay)
                continue
            error_delay = 0.0
            if len(jobs) < room:
                claim_now = False
            else:
                await self._gather_slots()

    async def _idle(self, room: int) -> bool:
        """Wait for work after a claim found the queue empty; True: claim now.

        On a store with ``claim_on_notify`` an armed watch claims for this pool the
        moment a notification for the queue arrives, and the jobs start before that
        claim's commit is confirmed; the pool then claims itself only if the watch
        filled its room or more notifications came meanwhile. It claims itself too on
        poll_interval, on a local wake-up, or when there is no watch."""
        watch = self._session.arm(room)
        took = 0
        try:
            await self._wait(self._wake, self._patience())
        finally:
            if watch is not None:
                took = await self._session.disarm(watch)
        if watch is None or took == 0:
            return True
        return self._woken or watch.more or took >= room

    def _patience(self) -> float:
        """How long the loop may sleep: not past AHEAD_STALL while claimed jobs wait."""
        return ClaimAhead.patience(self._poll_interval, bool(self._ready))

    def _unstall(self) -> bool:
        """Hand back the jobs claimed ahead when no slot came free for AHEAD_STALL: jobs
        longer than the average hold every slot, and another server may be idle. Claiming
        ahead stops until this pool's jobs finish again. A fenced server writes nothing:
        its waiting jobs go with its running ones (see ``abandon``)."""
        if not self._ready or not ClaimAhead.stalled(time.monotonic() - self._freed):
            return False
        if not self._may_claim():
            return False
        self._policy.forget()
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
        if self._policy.ahead(self.concurrency):
            target = self._policy.target(self.concurrency)
            while self._room() < target and self._claiming and not self._unstall():
                await self._wait(self._slot, self._patience())
                # the concurrency (a queue control) or the jobs' pace may have changed
                # meanwhile: never wait for more room than the pool may now have
                target = min(target, self._policy.target(self.concurrency))
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

    def _accept(self, jobs: list[JobRow]) -> bool:
        """A claim's rows (ClaimSession._take): start them, or False while the server
        is fenced or the pool stopped or paused; then they go back once it settled."""
        if not self._may_claim() or not self._claiming or self.paused:
            return False
        if not self._ready:  # the stall clock starts when jobs begin to wait
            self._freed = time.monotonic()
        self._ready.extend(jobs)
        self._fill()
        return True

    def _roll_back(self, taken: list[JobRow]) -> None:
        """A claim rolled back after its rows were taken: they are not this server's,
        and stop, waiting or running."""
        mine = {id(row) for row in taken}
        self._ready = collections.deque(r for r in self._ready if id(r) not in mine)
        for task, row in list(self.running.items()):
            if id(row) in mine:
                task.cancel(msg="kiln: claim rolled back")

    def _fill(self) -> None:
        """Start claimed jobs while there are free slots."""
        # the loop is passed around rather than looked up: on Python 3.11 every lookup
        # (get_running_loop, current_task without a loop) is a getpid() system call
        ready, running, loop = self._ready, self.running, self._event_loop
        assert loop is not None
        slots = self.concurrency - len(self.lingering)
        while ready and len(running) < slots:
            row = ready.popleft()
            running[loop.create_task(self._run(row), name=f"kiln-job-{row.id}")] = row

    async def _run(self, row: JobRow) -> None:
        began = time.monotonic()
        result: JobResult | None = None
        thread: Any = None
        try:
            result = await self._attempt(row)
        except asyncio.CancelledError:
            pass  # cancelled outside shutdown (fencing): the server decides what happens
        except GeneratorExit:
            # the event loop is closing under a task that ignored its cancellation: the
            # server handed its attempt back already; nothing failed here
            raise
        except BaseException as exc:  # a bug in kiln's per-job code: a failed attempt,
            # never a hand-back, which gives the attempt back and would loop for ever
            log.exception("job %s: kiln failed running its attempt", row.id)
            result = self._executor.crashed(row, exc)
            self._events.emit(JobFinished(job=row, outcome=result.outcome, duration=0.0,
                                          error=exc))
        finally:
            thread = self._executor.sync.take(row.id, row.attempt)
            if thread is not None:  # counted before the slot is given to another job
                self._stuck(row, result, thread)
            self.running.pop(asyncio.current_task(self._event_loop), None)  # type: ignore[arg-type]
            self._freed = ended = time.monotonic()
            if self._ready and self._claiming and self._may_claim():
                self._fill()
            self._slot.set()
        if result is None:
            return
        self._policy.observe(ended - began)
        gate = self._gates.get(row.id) if self._gates else None
        if gate is not None:
            await gate.opened.wait()
            if gate.rolled_back:  # not this server's job: nothing to write
                return
        if thread is not None and (result.outcome is Outcome.CANCELLED or self.limited):
            self._push_once_ended(thread, result)
            return
        self._completer.push(result)

    def _push_once_ended(self, thread: Any, result: JobResult) -> None:
        """The result of an attempt whose plain def handler still runs past kill_grace,
        written once the handler has returned:
        - a cancelled job's: it is fenced off, and only ends the attempt in the database
          (which lets a requeue run the job again, and frees its concurrency slot);
        - in a queue that may hold limited jobs (a timeout, say): the job stays running,
          so its fleet-wide concurrency slot stays taken while its handler runs; the
          reconciler sees it held. If the server stops first, the rescuer settles it."""
        loop = self._event_loop
        assert loop is not None
        self._ending.add(result.job_id)

        def push() -> None:
            self._ending.discard(result.job_id)
            self._completer.push(result)

        def ended(_thread: Any) -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: the server is gone
                loop.call_soon_threadsafe(push)

        thread.add_done_callback(ended)

    async def _attempt(self, row: JobRow) -> JobResult:
        """The attempt's result: cancelled before it started, handed back under its
        right key (_rekeyed), or the handler's."""
        executor = self._executor
        result = executor.cancelled_before_start(row) if executor.cancelled_early else None
        if result is None and self._misfiled is not None:
            result = await self._rekeyed(row)
        return result if result is not None else await executor.run(row)

    async def _rekeyed(self, row: JobRow) -> JobResult | None:
        """A job claimed under a key its kind's declaration no longer gives: its key is
        set to the right one while this server holds it, and it is handed back without
        using its attempt (it runs at its next claim, under that key's limit; a rekey
        that failed is tried again then; one no longer this server's is not run either). None:
        the job runs (its key is right)."""
        assert self._misfiled is not None
        wrong = self._misfiled(row)
        if wrong is None:
            return None
        key, limit = wrong
        server_id = row.server_id or self._identity.id
        try:
            changed = await self._store.jobs_rekey({row.id: key}, {key: limit},
                                                   running_on=server_id)
        except Exception:  # not run under the wrong key: handed back, tried again
            log.warning("job %s: could not give it the concurrency key %r its kind's"
                        " declaration gives it (it keeps %r): handed back", row.id, key,
                        row.conc_key, exc_info=True)
        else:  # not changed: no longer this server's (fenced), so its hand-back is a no-op
            if changed:
                log.info("job %s was claimed under concurrency key %r; its kind's"
                         " declaration gives %r now: handed back under that key",
                         row.id, row.conc_key, key)
        self._events.emit(JobFinished(job=row, outcome=Outcome.HANDED_BACK, duration=0.0))
        return JobResult(job_id=row.id, server_id=server_id, attempt=row.attempt,
                         outcome=Outcome.HANDED_BACK, claimed_at=row.attempted_at)

    def _hand_back(self, rows: list[JobRow]) -> None:
        """Give back claimed jobs that never started; they count as handed back."""
        for row in rows:
            self._events.emit(JobFinished(job=row, outcome=Outcome.HANDED_BACK, duration=0.0))
            self._completer.push(JobResult(
                job_id=row.id, server_id=row.server_id or self._identity.id, attempt=row.attempt,
                outcome=Outcome.HANDED_BACK, claimed_at=row.attempted_at,
            ))

    def cancel_running(self) -> None:
        for task in list(self.running):
            task.cancel(msg="kiln: server shutting down")

    def abandon(self) -> list[JobRow]:
        """Forget tasks that ignored cancellation, and the claimed jobs not yet started;
        return their jobs (the server hands them back, or leaves them to the rescuer).
        The tasks linger, keeping their slots, until they end."""
        rows = [*self.running.values(), *self._ready]
        for task, row in self.running.items():
            if not task.done():
                self.lingering.add_task(task)
                self._events.emit(HandlerStuck(job=row, reason=self._reason(), thread=False))
        self.running.clear()
        self._ready.clear()
        return rows

    def _stuck(self, row: JobRow, result: JobResult | None, thread: Any) -> None:
        assert self._event_loop is not None
        self.lingering.add_thread(thread, self._event_loop)
        if result is not None and result.outcome is Outcome.CANCELLED:
            reason = "cancelled"
        elif result is not None and result.outcome is not Outcome.HANDED_BACK:
            reason = "timeout"
        else:
            reason = self._reason()
        log.warning("job %s: its plain def handler still runs after kill_grace (%s); its "
                    "thread keeps a slot of queue %s until it returns", row.id, reason,
                    self.queue)
        self._events.emit(HandlerStuck(job=row, reason=reason, thread=True))

    def _reason(self) -> str:
        return "fenced" if self._claiming else "shutdown"

    def _lingered(self) -> None:
        """A handler kiln had given up on ended: its slot is free."""
        self._freed = time.monotonic()
        if self._ready and self._claiming and self._may_claim():
            self._fill()
        self._slot.set()
