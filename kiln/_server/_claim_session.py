"""ClaimSession: one pool's claims, made by the pool itself or by a store's ClaimWatch.

Idle on a store with ``claim_on_notify`` (PostgreSQL), the pool arms a ClaimWatch: the
store claims for it on the LISTEN connection as a notification arrives and hands over
the rows before their commit is confirmed, so a notified job starts about one round
trip after its enqueue committed (bench/RESULTS.md, "Pickup latency", ADR 0004).
Results are fenced: should that commit fail, a job that ran anyway writes nothing, and
its writes wait behind the claim's gate until the commit is known.

One state at a time (``ClaimState``):

- IDLE: no claim in flight and no watch armed;
- CLAIMING: the pool's own claim is in flight (``claim``);
- ARMED: the queue looked empty and a watch waits for a notification (``arm``);
- TAKEN: the watch claimed and handed its rows over; its commit is not confirmed yet.

``disarm`` closes the watch (ARMED or TAKEN -> IDLE). A claim whose commit is still
unknown then settles in the background, its gate shut until it does (``_settle_later``).
The rows of the last claim, and whether the pool refused them, are kept until the next
claim starts: ``held`` names them to the reconciler.

Owns the claims and their gates; the pool (kiln._server._pool) decides whether it takes
the rows (``accept``), and runs them.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Sequence

from kiln._errors import KilnError, UnreachableError
from kiln._events import ClaimQueried, EventHub, JobClaimed, StoreFailed
from kiln._model._job import JobRow
from kiln._server._identity import Identity
from kiln.stores import Store
from kiln.stores._protocol import ClaimWatch

COMMIT_WAIT = 60.0  # seconds the writes of a notified claim wait for its late commit

Rows = Callable[[list[JobRow]], None]


class ClaimState(enum.Enum):
    IDLE = "idle"
    CLAIMING = "claiming"
    ARMED = "armed"
    TAKEN = "taken"


class Gate:
    """The commit of one watch claim, which its jobs' writes wait for."""

    __slots__ = ("ids", "opened", "rolled_back")

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids
        self.opened = asyncio.Event()
        self.rolled_back = False


class ClaimSession:
    def __init__(
        self,
        *,
        queue: str,
        kinds: Sequence[str],
        store: Store,
        events: EventHub,
        identity: Identity,
        limited: bool,
        keys: bool = True,
        accept: Callable[[list[JobRow]], bool],
        hand_back: Rows,
        roll_back: Rows,
        on_taken: Callable[[], None],
    ) -> None:
        self.queue = queue
        self._kinds = list(kinds)
        self._store = store
        self._events = events
        self._identity = identity
        # a limited queue's jobs are claimed under their key's lock, never on a watch
        self._limited = limited
        # ... of which only the queue's own limit, when none of the kinds has one
        self._keys = keys
        self._accept = accept  # start the rows, or False: the pool refuses them
        self._hand_back = hand_back  # rows that never started go back
        self._roll_back = roll_back  # rows of a claim that rolled back stop
        self._on_taken = on_taken  # a watch took rows: the pool looks at once
        self.watches = store.capabilities.claim_on_notify and not limited
        self.state = ClaimState.IDLE
        self._began = 0.0  # monotonic, while CLAIMING
        self._as = identity.id  # the id the last claim was made under
        self._taken: list[JobRow] = []  # the rows that claim handed over
        self._refused = False  # ... and that go back once it settled
        self._watch: ClaimWatch | None = None
        self._gate: Gate | None = None  # opens once the watch's claim settled
        self.gates: dict[int, Gate] = {}  # job id -> its unsettled claim's gate
        self._settling: set[asyncio.Task[None]] = set()  # gates waiting for a late commit
        self.claimed = 0
        self.claim_errors = 0

    def claim_age(self) -> float | None:
        """Seconds the pool's own claim has been in flight, None when there is none."""
        return time.monotonic() - self._began if self.state is ClaimState.CLAIMING else None

    def held(self) -> set[int]:
        """Ids of the jobs whose claim has not settled, or that the last claim took."""
        return {*self.gates, *(r.id for r in self._taken)}

    def watching(self) -> bool:
        """Whether an armed watch claims on a notification for the queue in the store."""
        watch = self._watch
        return watch is not None and watch.active

    async def claim(self, limit: int) -> list[JobRow]:
        """The pool's own claim of up to ``limit`` jobs; raises what the store raised."""
        self.state = ClaimState.CLAIMING
        self._began = began = time.monotonic()
        self._as, self._taken, self._refused = self._identity.id, [], False
        try:
            if self._limited:
                jobs = await self._store.job_claim(
                    self.queue, self._kinds, limit, self._as, limited=True, keys=self._keys
                )
            else:
                jobs = await self._store.job_claim(self.queue, self._kinds, limit, self._as)
            events = self._events
            if events.wants(ClaimQueried):
                events.emit(ClaimQueried(queue=self.queue, duration=time.monotonic() - began,
                                         claimed=len(jobs)))
            if jobs:
                self._take(jobs)
                if self._refused:
                    self._hand_back(jobs)
            return jobs
        finally:
            self.state = ClaimState.IDLE

    def failed(self, exc: BaseException) -> None:
        """A claim raised; for a watch, maybe after its rows were taken (its commit
        failed). A lost connection leaves it unknown whether the claim took: those jobs
        run on, and their results, fenced like any other, apply only if it did. Any
        other error rolled the claim back: those jobs are not this server's, and stop."""
        self.claim_errors += 1
        self._events.emit(StoreFailed(operation="job_claim", error=exc))
        taken, self._taken = self._taken, []
        if not taken or isinstance(exc, UnreachableError | OSError):
            if taken and self._refused:
                self._hand_back(taken)
            return
        self._roll_back(taken)
        if self._gate is not None:
            self._gate.rolled_back = True

    def _take(self, jobs: list[JobRow]) -> None:
        """A claim's rows: the pool starts them, unless the claim hung while the server
        fenced itself (or rejoined under a new id) or the pool stopped; then its rows
        belong to a registration that is, or will be, judged dead, and go back once the
        claim settled. A watch's rows come before their commit is confirmed."""
        self._taken = jobs
        self.claimed += len(jobs)
        events = self._events
        if events.wants(JobClaimed):
            for row in jobs:
                latency = (row.attempted_at or row.run_at) - row.run_at
                events.emit(JobClaimed(job=row, latency=max(latency.total_seconds(), 0.0)))
        if self._identity.id != self._as or not self._accept(jobs):
            self._refused = True

    # claims on notifications -------------------------------------------------------
    def arm(self, room: int) -> ClaimWatch | None:
        """Have the store claim up to ``room`` jobs on the queue's next notification;
        None when this pool does not claim on notifications."""
        if not self.watches:
            return None
        self._as, self._taken, self._refused = self._identity.id, [], False
        self.state = ClaimState.ARMED
        self._watch = self._store.job_claim_watch(
            self.queue, self._kinds, room, self._as, self._take_notified
        )
        return self._watch

    def _take_notified(self, jobs: list[JobRow]) -> None:
        gate = self._gate = Gate([row.id for row in jobs])
        for job_id in gate.ids:
            self.gates[job_id] = gate
        self.state = ClaimState.TAKEN
        self._take(jobs)
        self._on_taken()

    async def settled(self, job_id: int) -> None:
        """Return once the claim of ``job_id`` has settled. A watch's jobs start before
        their claim's commit is confirmed, and a write sent before it would see the job
        as it was before the claim (READ COMMITTED) and be refused as fenced: results
        and checkpoints wait here."""
        gate = self.gates.get(job_id)
        if gate is not None:
            await gate.opened.wait()

    async def disarm(self, watch: ClaimWatch) -> int:
        """Close the watch; return how many jobs it took. Should its claim's commit
        still be unknown, the gate stays shut until it settles (see _settle_later)."""
        self._watch = None
        try:
            runs = await watch.close()
        except (KilnError, OSError) as exc:
            self.failed(exc)
            return 0
        finally:
            if watch.unsettled and self._gate is not None:
                self._settle_later(watch, self._gate)
            else:
                self._open_gate()
            self.state = ClaimState.IDLE
        events = self._events
        if events.wants(ClaimQueried):
            for run in runs:
                events.emit(ClaimQueried(queue=self.queue, duration=run.duration,
                                         claimed=run.claimed))
        if self._refused:
            self._hand_back(self._taken)
        return sum(run.claimed for run in runs)

    def _settle_later(self, watch: ClaimWatch, gate: Gate) -> None:
        """A claim whose commit is unknown: its jobs run on, but nothing they write may
        go before the commit (it would see the job unclaimed and apply nothing). The
        gate opens once the claim settles, or marks the jobs not ours if it rolled back;
        after COMMIT_WAIT it opens anyway: a result that then applies nothing is kept,
        and the reconciler writes it again once the commit shows."""
        self._gate = None
        taken, self._taken = self._taken, []
        self.claim_errors += 1
        self._events.emit(StoreFailed(operation="job_claim", error=UnreachableError(
            "job_claim", "the commit of a claim on a notification did not settle in time")))

        async def settle() -> None:
            try:
                await watch.wait_settled(COMMIT_WAIT)
                error = watch.error
                if error is not None and not isinstance(error, UnreachableError):
                    self._taken, self._gate = taken, gate
                    self.failed(error)  # rolled back: those jobs stop
                    self._taken, self._gate = [], None
            finally:
                self._release(gate)

        task = asyncio.get_running_loop().create_task(
            settle(), name=f"kiln-pool-{self.queue}-commit"
        )
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    def _open_gate(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            self._release(gate)

    def _release(self, gate: Gate) -> None:
        gate.opened.set()
        for job_id in gate.ids:  # a job claimed again later must not find it
            if self.gates.get(job_id) is gate:
                del self.gates[job_id]
