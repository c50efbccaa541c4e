"""Client: enqueue jobs and administer them, from async code (and sync inserts).

Assembles option handling, validation and enqueue hooks around a Store. One Client
is bound to one Store, hence to one event loop; App hands out the right one.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Unpack

from kiln._client import _batch, _queues
from kiln._client._bus import Bus
from kiln._client._cancelling import CancelResult, check_one, not_cancellable
from kiln._client._catalog import KindCatalog
from kiln._client._filters import audit_detail, filter_of
from kiln._client._fleet import FleetReads
from kiln._client._joined import joined, joined_sync
from kiln._errors import UnknownKindError, ValidationError
from kiln._events import EventHub, JobsEnqueued
from kiln._model import _validate as v
from kiln._model._build import build_job, check_names
from kiln._model._deprecated import deprecated
from kiln._model._job import (
    DEAD_AFTER,
    EnqueueResult,
    JobFilter,
    JobRow,
    NewJob,
)
from kiln._model._kindref import KindRef, kind_name, resolve
from kiln._model._kinds import Declaration, Kind
from kiln._model._options import EnqueueOptions
from kiln._model._tags import check_filter
from kiln._model._wakeup import CANCEL_PAYLOAD, scheduled
from kiln.stores import Store, store_from_url

EnqueueFinisher = Callable[[int | None, BaseException | None], None]
EnqueueHook = Callable[[NewJob], EnqueueFinisher | None]
# A hook may also take a whole insert of several jobs at once, through a ``batch``
# attribute (a tracer makes one span for the batch); it gets every id, or None on error.
BatchFinisher = Callable[[Sequence[int] | None, BaseException | None], None]
BatchHook = Callable[[Sequence[NewJob]], BatchFinisher | None]
# a step of a chain or fan-in, an item of enqueue_many: a kind by name or by ref
# (a JobKind, a JobHandle)
Step = tuple["str | KindRef[Any]", Any]
ManyItem = (
    tuple["str | KindRef[Any]", Any] | tuple["str | KindRef[Any]", Any, Mapping[str, Any]]
    | NewJob
)



def _results(ids: Sequence[int]) -> list[EnqueueResult]:
    """The store's ids as EnqueueResults (unique jobs come back as such already)."""
    new = int.__new__  # an inserted job's result: no per-result attribute to set
    return [i if i.__class__ is EnqueueResult else new(EnqueueResult, i) for i in ids]


def _keep_encoded(hooks: Sequence[EnqueueHook], jobs: Sequence[NewJob]) -> None:
    """A hook may change a job's args: then the text encoded at build is stale. Hooks
    that only touch metadata (kilnotel's) say so with ``keeps_args = True``."""
    if all(getattr(hook, "keeps_args", False) for hook in hooks):
        return
    for job in jobs:
        job.args_json = None


def _wake_payloads(jobs: Sequence[NewJob]) -> set[str]:
    """What to announce on a Bus after an insert: queues, and when delayed jobs are due."""
    payloads: set[str] = set()
    now = time.time()
    for job in jobs:
        due = job.run_at.timestamp() if job.run_at is not None else now + job.delay
        if due > now:
            payloads.add(scheduled(due))
        else:
            payloads.add(job.queue)
    return payloads


class Client(FleetReads):
    """Enqueue, admin and reads over one database. Bound to one event loop, so its
    methods are async; the sync twins end in ``_sync`` (``enqueue_sync``,
    ``enqueue_many_sync``, ...). ``App.client()`` gives the client of the running
    event loop; a service that holds no handlers builds one with
    ``Client.from_url(url)``."""

    def __init__(
        self,
        store: Store,
        kinds: Mapping[str, Kind] | None = None,
        *,
        bus: Bus | None = None,
        events: EventHub | None = None,
        hooks: list[EnqueueHook] | None = None,
        known_only: bool = True,
        catalog: KindCatalog | None = None,
    ) -> None:
        super().__init__(store)
        self.kinds = kinds
        # with kinds and known_only, a kind neither declared here nor published is refused
        self.known_only = known_only
        self.catalog = catalog or KindCatalog(store, kinds)
        # a Bus, when given, carries this client's wake-ups (an App with a Bus builds
        # PostgreSQL stores that send no NOTIFY: kiln.stores.with_bus)
        self.bus = bus
        self.events = events or EventHub()
        self._hooks: list[EnqueueHook] = hooks if hooks is not None else []

    @classmethod
    def from_url(cls, url: str, *, bus: Bus | None = None) -> Client:
        """A client of the database at ``url`` that holds no handlers: kinds resolve
        from what servers publish. Not opened yet: ``await client.open()`` first."""
        return cls(store_from_url(url), bus=bus)

    def add_enqueue_hook(self, hook: EnqueueHook) -> None:
        """Call ``hook(job)`` before each insert; it may return a finisher(id, error).

        A hook with a ``batch`` attribute gets an insert of several jobs as one call,
        ``hook.batch(jobs)``, whose finisher gets every id (or None) and the error."""
        self._hooks.append(hook)

    def build(
        self, kind: str, args: Any = None, *, limited: bool = True,
        **options: Unpack[EnqueueOptions],
    ) -> NewJob:
        """A NewJob from what the catalog holds (call ``catalog.ensure`` first).
        ``limited`` False: without its concurrency key (a template, kiln._client._batch)."""
        v.check_name("kind", kind)
        declared = self.catalog.get(kind)
        if declared is None and self.known_only and self.kinds:
            raise UnknownKindError(kind)
        return build_job(kind, {} if args is None else args, None, declared, limited=limited,
                         **options)

    def declaration(self, kind: str) -> Kind | Declaration | None:
        """The declaration ``kind`` resolves to here: local, published (cached), or None."""
        return self.catalog.get(kind)

    def _before(self, jobs: Sequence[NewJob]) -> list[BatchFinisher]:
        finishers: list[BatchFinisher] = []
        for hook in self._hooks:
            batch: BatchHook | None = getattr(hook, "batch", None)
            if batch is not None and len(jobs) > 1:
                done = batch(jobs)
                if done is not None:
                    finishers.append(done)
                continue
            for index, job in enumerate(jobs):
                fin = hook(job)
                if fin is not None:
                    finishers.append(_one(index, fin))
        return finishers

    def _after(
        self,
        jobs: Sequence[NewJob],
        ids: Sequence[int] | None,
        finishers: list[BatchFinisher],
        error: BaseException | None,
    ) -> None:
        for fin in finishers:
            fin(ids, error)
        if ids and self.bus is not None:
            for payload in _wake_payloads(jobs):
                self.bus.publish_sync(payload)
        if ids and self.events.active:
            counts: dict[tuple[str, str], int] = {}
            for job, job_id in zip(jobs, ids, strict=True):
                if getattr(job_id, "inserted", True):  # a unique job's duplicate: not counted
                    counts[(job.queue, job.kind)] = counts.get((job.queue, job.kind), 0) + 1
            for (queue, kind), n in counts.items():
                self.events.emit(JobsEnqueued(queue=queue, kind=kind, count=n))

    async def _insert(
        self, jobs: Sequence[NewJob], conn: Any = None
    ) -> builtins.list[EnqueueResult]:
        check_names(jobs)
        if conn is not None:
            conn = await joined(conn)
        finishers = self._before(jobs) if self._hooks else []
        if self._hooks:
            _keep_encoded(self._hooks, jobs)
        try:
            ids = _results(await self._store.job_insert_many(jobs, conn))
        except BaseException as exc:
            self._after(jobs, None, finishers, exc)
            raise
        self._after(jobs, ids, finishers, None)
        return ids

    def _insert_sync(
        self, jobs: Sequence[NewJob], conn: Any = None
    ) -> builtins.list[EnqueueResult]:
        check_names(jobs)
        if conn is not None:
            conn = joined_sync(conn)
        finishers = self._before(jobs) if self._hooks else []
        if self._hooks:
            _keep_encoded(self._hooks, jobs)
        try:
            ids = _results(self._store.job_insert_many_sync(jobs, conn))
        except BaseException as exc:
            self._after(jobs, None, finishers, exc)
            raise
        self._after(jobs, ids, finishers, None)
        return ids

    async def insert_many(
        self, jobs: Sequence[NewJob], conn: Any = None
    ) -> builtins.list[EnqueueResult]:
        """Deprecated: ``enqueue_many`` (which takes ready-made NewJobs too)."""
        deprecated("Client.insert_many", "Client.enqueue_many")
        return await self._insert(jobs, conn)

    def insert_many_sync(
        self, jobs: Sequence[NewJob], conn: Any = None
    ) -> builtins.list[EnqueueResult]:
        """Deprecated: ``enqueue_many_sync`` (which takes ready-made NewJobs too)."""
        deprecated("Client.insert_many_sync", "Client.enqueue_many_sync")
        return self._insert_sync(jobs, conn)

    async def enqueue(
        self, kind: str | KindRef[Any], args: Any = None, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Insert one job; its id, with ``.inserted`` False for a unique job's duplicate.
        ``kind`` is a name, or a ``kiln.kind(...)`` / ``JobHandle`` (args type-checked);
        with ``conn`` the insert joins that transaction."""
        name, args = resolve(kind, args)
        await self.catalog.ensure((name,))
        return (await self._insert([self.build(name, args, **options)], conn))[0]

    def enqueue_sync(
        self, kind: str | KindRef[Any], args: Any = None, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """``enqueue`` from sync code (a sync client: ``App.sync_client()``)."""
        name, args = resolve(kind, args)
        self.catalog.ensure_sync((name,))
        return self._insert_sync([self.build(name, args, **options)], conn)[0]

    async def enqueue_many(
        self, jobs: Sequence[ManyItem], *, conn: Any = None
    ) -> builtins.list[EnqueueResult]:
        """Insert ``(kind, args)`` or ``(kind, args, options)`` items (or ready-made
        ``NewJob``s), all checked first, then written in one transaction (or ``conn``'s);
        their ids, in order."""
        await self.catalog.ensure(_kinds(jobs))
        return await self._insert(_batch.build_all(self, jobs), conn)

    def enqueue_many_sync(
        self, jobs: Sequence[ManyItem], *, conn: Any = None
    ) -> builtins.list[EnqueueResult]:
        """``enqueue_many`` from sync code."""
        self.catalog.ensure_sync(_kinds(jobs))
        return self._insert_sync(_batch.build_all(self, jobs), conn)

    async def enqueue_chain(
        self, steps: Sequence[Step], *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> builtins.list[EnqueueResult]:
        """Enqueue jobs that run one after another: each depends on the one before.
        Every step is checked first, then all are written in one transaction (or in
        the caller's, with ``conn``): all or none. A step's kind may be a ``JobKind``
        or a ``JobHandle``."""
        named = _steps(steps)
        await self.catalog.ensure(kind for kind, _args in named)
        return await self._insert(_batch.chain(self, named, options), conn)

    def enqueue_chain_sync(
        self, steps: Sequence[Step], *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> builtins.list[EnqueueResult]:
        """``enqueue_chain`` from sync code."""
        named = _steps(steps)
        self.catalog.ensure_sync(kind for kind, _args in named)
        return self._insert_sync(_batch.chain(self, named, options), conn)

    async def enqueue_fan_in(
        self, parts: Sequence[Step], then: Step, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> tuple[builtins.list[EnqueueResult], EnqueueResult]:
        """Enqueue ``parts`` and one job that runs after all of them complete; checked
        first, then written in one transaction (or the caller's, with ``conn``)."""
        named, last = _steps(parts), resolve(*then)
        await self.catalog.ensure([*(kind for kind, _args in named), last[0]])
        ids = await self._insert(_batch.fan_in(self, named, last, options), conn)
        return ids[:-1], ids[-1]

    def enqueue_fan_in_sync(
        self, parts: Sequence[Step], then: Step, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> tuple[builtins.list[EnqueueResult], EnqueueResult]:
        """``enqueue_fan_in`` from sync code."""
        named, last = _steps(parts), resolve(*then)
        self.catalog.ensure_sync([*(kind for kind, _args in named), last[0]])
        ids = self._insert_sync(_batch.fan_in(self, named, last, options), conn)
        return ids[:-1], ids[-1]

    # admin ---------------------------------------------------------------------
    async def get(self, job_id: int) -> JobRow | None:
        """The job ``job_id`` as the store holds it (with its result), or None."""
        return await self._store.job_get(job_id)

    async def list(
        self, filter: JobFilter, limit: int = 50, before_id: int | None = None,
        after_id: int | None = None, *, brief: bool = False,
    ) -> builtins.list[JobRow]:
        """Jobs matching ``filter``, newest first (below ``before_id``), or oldest first
        above ``after_id`` (0 for the first page). ``brief``: args, params, metadata and
        errors over 4 KiB as JSON text are left out and named in ``JobRow.cut`` (errors
        keep the last attempt's record without its traceback)."""
        if not 1 <= limit <= 1000:
            raise ValidationError(f"limit must be between 1 and 1000, got {limit}")
        if before_id is not None and after_id is not None:
            raise ValidationError("give before_id or after_id, not both")
        return await self._store.job_list(check_filter(filter), limit, before_id, after_id,
                                          brief=brief)

    async def count(self, filter: JobFilter) -> int:
        """How many jobs match ``filter`` (``kiln.filter_of(...)``)."""
        return await self._store.job_count(check_filter(filter))

    async def requeue(
        self, filter: JobFilter, actor: str = "api", *, dead_after: float = DEAD_AFTER
    ) -> int:
        """Requeue matching jobs with a full retry budget; returns how many.

        A job cancelled while running is left alone until that attempt has ended (its
        server wrote the attempt's result) or its server is dead: no heartbeat for
        ``dead_after`` seconds (your ServerConfig.dead_after; a larger value is safe,
        a smaller one is not), or deregistered. Its handler may still be running."""
        n = await self._store.jobs_requeue(check_filter(filter), dead_after)
        await self._audit(actor, "requeue", n, filter)
        return n

    async def cancel(self, filter: JobFilter, actor: str = "api") -> CancelResult:
        """Cancel the matching jobs that have not finished; returns how many, and the
        named ids that were finished already or unknown (reported, not an error).

        A running job is cancelled at once, wherever it runs: its server stops the
        handler within one notification, or one heartbeat_interval without one (an
        ``async def`` handler's task is cancelled; a plain ``def`` handler sees
        ``job.cancelled`` set, and must return). It uses no more attempts, is not
        retried, and its errors record ``actor``."""
        filter = check_filter(filter)
        finished, missing = await not_cancellable(self._store, filter)
        n = await self._store.jobs_cancel(filter, actor)
        if n and self.bus is not None:  # wake the servers; the store's NOTIFY otherwise
            await self.bus.publish(CANCEL_PAYLOAD)
        await self._audit(actor, "cancel", n, filter)
        return CancelResult(n, finished, missing)

    async def cancel_job(self, job_id: int, actor: str = "api") -> CancelResult:
        """Cancel one job (running or not); ``JobNotFoundError`` or ``JobFinishedError``
        (both ValidationErrors) when there is nothing to cancel, before any write."""
        await check_one(self._store, job_id)
        result = await self.cancel(filter_of(ids=[job_id]), actor)
        if not result:  # it finished meanwhile
            await check_one(self._store, job_id)
        return result

    async def delete(self, filter: JobFilter, actor: str = "api") -> int:
        """Delete the matching jobs, audited as ``actor``; returns how many."""
        n = await self._store.jobs_delete(check_filter(filter))
        await self._audit(actor, "delete", n, filter)
        return n

    async def _audit(self, actor: str, action: str, n: int, f: JobFilter) -> None:
        await self._store.audit_record(actor, action, n, audit_detail(f))

    # queue controls (kiln._client._queues) -----------------------------------------------
    async def pause_queue(self, queue: str, actor: str = "api") -> bool:
        """Pause ``queue`` ("*": every queue): from the commit on no server claims its
        jobs; running jobs finish; enqueueing into it still works. False when it was
        paused already. An unknown queue raises UnknownQueueError."""
        return await _queues.pause(self._store, self.bus, queue, actor)

    async def resume_queue(self, queue: str, actor: str = "api") -> int:
        """Lift the pause of ``queue`` ("*": every pause); returns how many were lifted."""
        return await _queues.resume(self._store, self.bus, queue, actor)

    async def set_concurrency(
        self, queue: str, concurrency: int | None, server: str | None = None,
        actor: str = "api",
    ) -> None:
        """Run at most ``concurrency`` jobs of ``queue`` at once on every server of it,
        or on ``server`` only (a registered server's id), without a restart; None goes
        back to the configured value. Lowering it never cancels a running job."""
        await _queues.set_concurrency(self._store, self.bus, queue, concurrency, server, actor)

    async def remove_queue_limit(self, queue: str, actor: str = "api") -> _queues.LimitRemoved:
        """Remove the fleet-wide concurrency limit of ``queue`` (``app.queue_concurrency``),
        audited: claims obey no limit from the commit on. A limit no live server declares
        goes by itself (a server's start, or the leader's sweeper); this is for one that
        must go now, or one a kiln older than the declarations declared. A server that
        still declares it puts it back when it starts."""
        return await _queues.remove_limit(self._store, queue, actor)

    async def queues(self) -> builtins.list[_queues.QueueState]:
        """Every known queue: paused or not, concurrency per server, jobs by state."""
        return await _queues.states(self._store)


def _kinds(items: Sequence[ManyItem]) -> builtins.list[str]:
    return [kind_name(item[0]) for item in items if not isinstance(item, NewJob)]


def _steps(steps: Sequence[Step]) -> builtins.list[tuple[str, Any]]:
    return [resolve(kind, args) for kind, args in steps]


def _one(index: int, fin: EnqueueFinisher) -> BatchFinisher:
    def finish(ids: Sequence[int] | None, error: BaseException | None) -> None:
        fin(ids[index] if ids else None, error)

    return finish
