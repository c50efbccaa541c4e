"""Typed events and the hub that delivers them: the seam between kiln and kilnotel.

The core emits an event for everything that happens; anyone may subscribe.
Isolation: a subscriber is called inline on the server's event loop, inside a
try/except; an exception is logged (once per subscriber and event type) and counted
in ``EventHub.errors``, never propagated. Inline subscribers must be quick (a metric
update). Slow work belongs in a queued subscriber (``subscribe(fn, queued=True)``):
events go through a bounded queue to a task of its own; when the queue is full the
event is dropped and counted in ``EventHub.dropped``, so a stuck subscriber costs
memory bounded by ``queue_size`` and never stalls job processing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar, overload

from kiln._model._job import JobRow, Outcome

log = logging.getLogger("kiln.events")


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """Base of every event."""


@dataclasses.dataclass(frozen=True, slots=True)
class JobsEnqueued(Event):
    """Jobs were inserted: one event per (queue, kind) of each enqueue call, by the
    client that inserted them (a duplicate of a unique job is not counted)."""

    queue: str
    kind: str
    count: int


@dataclasses.dataclass(frozen=True, slots=True)
class JobClaimed(Event):
    """A server claimed ``job`` (emitted only while someone subscribes to it)."""

    job: JobRow
    latency: float  # seconds from ready (run_at) to claimed


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimQueried(Event):
    """One claim query of a pool ran: how long it took and how many jobs it took."""

    queue: str
    duration: float  # seconds the claim round trip took
    claimed: int


@dataclasses.dataclass(frozen=True, slots=True)
class JobStarted(Event):
    """An attempt of ``job`` begins: its middleware and handler run next (emitted only
    while someone subscribes to it)."""

    job: JobRow


@dataclasses.dataclass(frozen=True, slots=True)
class JobFinished(Event):
    """One attempt ended. ``outcome`` tells how (retry, failed for good, snoozed, ...)."""

    job: JobRow
    outcome: Outcome
    duration: float
    error: BaseException | None = None
    retry_in: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class HandlerStuck(Event):
    """kiln gave up on an attempt whose handler still runs: a plain ``def`` handler past
    kill_grace after its timeout, shutdown, fence or cancel, or an async one that
    ignored its cancellation when the server fenced itself. It keeps its slot until it
    ends."""

    job: JobRow
    reason: str  # "timeout", "shutdown", "fenced" or "cancelled"
    thread: bool  # a plain def handler's thread (else an async task)


@dataclasses.dataclass(frozen=True, slots=True)
class JobCancelled(Event):
    """The handler of a running job that someone cancelled (``client.cancel``, the CLI,
    the dashboard) ended on this server. ``latency``: seconds from the cancel (by the
    database clock, as the server learned of it) to the handler's end; for a plain
    ``def`` handler still running after kill_grace (``stuck``), to when kiln gave up."""

    job: JobRow
    latency: float
    stuck: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class JobRescued(Event):
    """The leader's rescuer took ``job`` back from a dead server: retried, or failed
    for good when it had no attempts left."""

    job: JobRow
    dead_server_id: str
    outcome: Outcome  # RETRY or FAILED (out of attempts)


@dataclasses.dataclass(frozen=True, slots=True)
class JobsAdmitted(Event):
    """The admitter let pending jobs of one rate-limit ``key`` become available."""

    key: str
    queue: str
    kind: str
    delays: tuple[float, ...]  # created to admitted, seconds, one per job


@dataclasses.dataclass(frozen=True, slots=True)
class JobsReleased(Event):
    """Jobs became available and their queue's servers were woken. ``reason``:
    "scheduled" (their run_at came, the releaser), "dependencies" (the jobs they waited
    on completed), "admitted" (a rate limit let them in), "rescued" (retried after their
    server died), "cron" (a recurring job's slot), "stranded" (the sweeper released
    dependents that no completion had released), "adopted" (a kind's declaration was
    applied to jobs enqueued without it, or lifted the concurrency key of jobs whose
    limit was removed)."""

    queue: str
    count: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderChanged(Event):
    """This server took (``is_leader``) or lost the leader lease."""

    server_id: str
    is_leader: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Heartbeat(Event):
    """One heartbeat of this server: confirmed (``ok``) or failed; ``age`` is the
    time since the last confirmed one (0 when ok)."""

    server_id: str
    ok: bool
    age: float  # seconds since the last confirmed heartbeat


@dataclasses.dataclass(frozen=True, slots=True)
class Fenced(Event):
    """The server fenced itself off: ``reason`` is "registration lost" or "no
    heartbeat confirmed for N.Ns". It stops claiming, cancels its jobs and rejoins under
    a new id."""

    server_id: str
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class ServerStopping(Event):
    """The server stopped claiming and waits up to ``timeout`` seconds (its
    shutdown_timeout) for the jobs still ``running`` before it cancels them and hands
    them back."""

    server_id: str
    timeout: float
    running: tuple[JobRow, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class NotifierChanged(Event):
    """The wake-up channel went up or down: ``source`` is "listen" (PostgreSQL
    LISTEN) or the bus's name; while down, servers poll."""

    up: bool
    source: str  # "listen" or a bus name


@dataclasses.dataclass(frozen=True, slots=True)
class StoreFailed(Event):
    """A store call of a server's background loop failed (``operation`` is the call,
    such as job_claim, server_heartbeat, job_results_apply); the loop retries. A Bus
    publish that failed is one too (``bus_publish``): the wake-up is lost, and other
    servers find the jobs within poll_interval."""

    operation: str
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True)
class ResultPoisoned(Event):
    """The store refused one result (the others of its batch were written): it was
    written as a failed attempt whose error says why."""

    job_id: int
    outcome: Outcome  # the outcome that could not be written
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True)
class ResultDropped(Event):
    """Neither a result nor its replacement could be written, while others were: it
    was dropped, and its job is left to reconciliation or a rescue."""

    job_id: int
    outcome: Outcome
    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True)
class ResultsUnapplied(Event):
    """Results that were written but applied nothing (fenced: the job was rescued,
    cancelled or handed over, or the claim that ran it never committed)."""

    job_ids: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class CompleterCrashed(Event):
    """The results writer task raised; it is restarted."""

    error: BaseException


@dataclasses.dataclass(frozen=True, slots=True)
class JobReconciled(Event):
    """The database said this server runs a job that it does not hold (a claim whose
    reply was lost, a result that applied nothing): ``action`` is "handed_back" (back to
    its queue without using an attempt) or "result_written" (its kept result again)."""

    job_id: int
    queue: str
    kind: str
    attempt: int
    action: str


@dataclasses.dataclass(frozen=True, slots=True)
class MaintenanceRan(Event):
    """One pass of a periodic service, with what it did. ``service`` is its name:
    "pruner", "sweeper", "rescuer", "scheduler" (cron), "admitter", "releaser",
    "reconciler" or "governor"."""

    service: str
    counts: dict[str, int]


Subscriber = Callable[[Event], Any]
E = TypeVar("E", bound=Event)
# a queued subscriber: its function, its queue, the event types it takes (None: all)
Queued = tuple[Callable[[Any], Any], "asyncio.Queue[Event]", frozenset[type[Event]] | None]


class EventHub:
    """Delivers events to subscribers; never lets one break the emitter.

    A subscriber that wants only some event types says so with an ``event_types``
    attribute (a collection of Event subclasses), or ``subscribe(fn, types=...)``.
    Emitters ask ``wants(JobStarted)`` before building a per-job event, so an event
    nobody wants costs nothing.
    """

    def __init__(self, queue_size: int = 10_000) -> None:
        self._inline: list[tuple[Subscriber, frozenset[type[Event]] | None]] = []
        self._queued: list[Queued] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._queue_size = queue_size
        self._warned: set[tuple[int, type[Event]]] = set()
        self._wanted: dict[type[Event], bool] = {}
        self._all = False  # some subscriber takes every type
        self.errors = 0
        self.dropped = 0

    @overload
    def subscribe(
        self, fn: Callable[[E], Any], *, queued: bool = False, types: Iterable[type[E]],
    ) -> Callable[[], None]: ...
    @overload
    def subscribe(
        self, fn: Subscriber, *, queued: bool = False, types: None = None,
    ) -> Callable[[], None]: ...
    def subscribe(
        self, fn: Callable[[Any], Any], *, queued: bool = False,
        types: Iterable[type[Event]] | None = None,
    ) -> Callable[[], None]:
        """Call ``fn(event)`` for every event, or only for events of ``types`` (or of
        ``fn.event_types``); returns a function that unsubscribes."""
        self._wanted.clear()
        if types is None:
            types = getattr(fn, "event_types", None)
        only = None if types is None else frozenset(types)
        self._all = self._all or only is None
        if not queued:
            entry = (fn, only)
            self._inline.append(entry)
            return lambda: self._unsubscribe_inline(entry)
        queue: asyncio.Queue[Event] = asyncio.Queue(self._queue_size)
        qentry = (fn, queue, only)
        self._queued.append(qentry)
        with contextlib.suppress(RuntimeError):  # no loop yet: started by start()
            self._tasks.append(asyncio.get_running_loop().create_task(self._drain(qentry)))
        return lambda: self._unsubscribe_queued(qentry)

    def _unsubscribe_inline(self, entry: tuple[Subscriber, frozenset[type[Event]] | None]) -> None:
        if entry in self._inline:
            self._inline.remove(entry)
        self._recount()

    def _unsubscribe_queued(self, entry: Queued) -> None:
        if entry in self._queued:
            self._queued.remove(entry)
        self._recount()

    def _recount(self) -> None:
        self._wanted.clear()
        self._all = any(t is None for t in self._types())

    @property
    def active(self) -> bool:
        return bool(self._inline or self._queued)

    def wants(self, cls: type[Event]) -> bool:
        """Whether an event of type ``cls`` would reach any subscriber."""
        if self._all:
            return True
        wanted = self._wanted.get(cls)
        if wanted is None:
            wanted = self._wanted[cls] = any(
                t is not None and cls in t for t in self._types())
        return wanted

    def _types(self) -> Iterator[frozenset[type[Event]] | None]:
        """The event types of every subscriber, inline and queued (None: all)."""
        yield from (t for _fn, t in self._inline)
        yield from (t for _fn, _queue, t in self._queued)

    def emit(self, event: Event) -> None:
        for fn, types in self._inline:
            if types is not None and event.__class__ not in types:
                continue
            try:
                fn(event)
            except Exception:
                self._failed(fn, event)
        for _fn, queue, types in self._queued:
            if types is not None and event.__class__ not in types:
                continue
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                self.dropped += 1

    def _failed(self, fn: Subscriber, event: Event) -> None:
        self.errors += 1
        key = (id(fn), type(event))
        if key not in self._warned:
            self._warned.add(key)
            log.exception("event subscriber %r failed on %s", fn, type(event).__name__)

    async def _drain(self, entry: Queued) -> None:
        fn, queue, _types = entry
        while True:
            event = await queue.get()
            try:
                result = fn(event)
                if isinstance(result, Awaitable):
                    await result
            except Exception:
                self._failed(fn, event)

    def start(self) -> None:
        running = {id(t) for t in self._tasks if not t.done()}
        if running:
            return
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._drain(entry), name="kiln-events") for entry in self._queued
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
