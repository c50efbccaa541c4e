"""Client: enqueue jobs and administer them, from async code (and sync inserts).

Assembles option handling, validation and enqueue hooks around a Store. One Client
is bound to one Store, hence to one event loop; App hands out the right one.
"""

from __future__ import annotations

import builtins
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Unpack

from kiln import _queues
from kiln import _validate as v
from kiln._batch import encode_args
from kiln._bus import Bus
from kiln._cancelling import CancelResult, check_one, not_cancellable
from kiln._catalog import KindCatalog
from kiln._concurrency import stamp
from kiln._errors import UnknownKindError, ValidationError
from kiln._events import EventHub, JobsEnqueued
from kiln._fleet import FleetReads
from kiln._job import (
    DEFAULT_QUEUE,
    MAX_ATTEMPTS,
    EnqueueResult,
    JobFilter,
    JobRow,
    JobState,
    NewJob,
    RateLimit,
)
from kiln._joined import joined, joined_sync
from kiln._kinds import Declaration, Kind
from kiln._options import ENQUEUE_OPTIONS, EnqueueOptions, NoMoreKeys
from kiln._retry import as_backoff, backoff_to_json
from kiln._tags import check_filter, check_pairs, check_tags
from kiln._unique import Unique
from kiln._wakeup import CANCEL_PAYLOAD, scheduled
from kiln.stores import Store, store_from_url
from kiln.stores._protocol import DEAD_AFTER

EnqueueFinisher = Callable[[int | None, BaseException | None], None]
EnqueueHook = Callable[[NewJob], EnqueueFinisher | None]
# A hook may also take a whole insert of several jobs at once, through a ``batch``
# attribute (a tracer makes one span for the batch); it gets every id, or None on error.
BatchFinisher = Callable[[Sequence[int] | None, BaseException | None], None]
BatchHook = Callable[[Sequence[NewJob]], BatchFinisher | None]



def build_job(
    kind: str, args: Any, known: Mapping[str, Kind] | None,
    declared: Kind | Declaration | None = None, *, limited: bool = True,
    **options: Unpack[EnqueueOptions],
) -> NewJob:
    """Validate and turn enqueue arguments into a NewJob; raise before anything is written.

    An option given here wins over the kind's declaration: the one in ``known``, else
    ``declared`` (published by a server), else the defaults."""
    v.check_name("kind", kind)
    unknown = set(options) - ENQUEUE_OPTIONS
    if unknown:  # only from untyped callers (a dict of a form's fields, say)
        raise ValidationError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
    spec = known.get(kind) if known else declared
    if known and spec is None:
        raise UnknownKindError(kind)
    args_json = encode_args(args)  # the check, and the text the store sends
    queue = options.get("queue", spec.queue if spec else DEFAULT_QUEUE)
    v.check_name("queue", queue)
    metadata = dict(options.get("metadata") or {})
    v.check_json("metadata", metadata)
    run_at = options.get("run_at")
    if run_at is not None and not isinstance(run_at, datetime):
        raise ValidationError(f"run_at must be a datetime, got {run_at!r}")
    if run_at is not None and run_at.tzinfo is None:
        run_at = run_at.replace(tzinfo=UTC)
    backoff = as_backoff(options.get("backoff"))
    timeout = options.get("timeout", spec.timeout if spec else None)
    rate_limit: RateLimit | None = options.get("rate_limit", spec.rate_limit if spec else None)
    rate_key = options.get("rate_key", spec.rate_key if spec else None)
    if rate_limit is not None and rate_key is None:
        rate_key = kind
    if rate_key is not None:
        v.check_name("rate_key", rate_key)
    depends_on = tuple(options.get("depends_on") or ())
    if any(isinstance(d, bool) or not isinstance(d, int) for d in depends_on):
        raise ValidationError(f"depends_on must hold job ids, got {list(depends_on)!r}")
    unique = options.get("unique", spec.unique if spec else None)
    # tags given here replace the kind's, as every other option does
    tags = check_tags(options["tags"]) if "tags" in options else spec.tags if spec else ()
    job = _with_unique(unique, NewJob(
        kind=kind,
        args=args,
        queue=queue,
        priority=v.check_priority(options.get("priority", spec.priority if spec else 0)),
        run_at=run_at,
        delay=v.check_delay(options.get("delay", 0.0)),
        max_attempts=v.check_max_attempts(
            options.get("max_attempts", spec.max_attempts if spec else MAX_ATTEMPTS)
        ),
        timeout=None if timeout is None else v.check_timeout(timeout),
        backoff=backoff_to_json(backoff) if backoff is not None else None,
        metadata=metadata,
        rate_key=rate_key,
        rate_limit=rate_limit,
        depends_on=depends_on,
        tags=tags,
    ))
    job.args_json = args_json
    if limited and spec is not None and spec.concurrency is not None:
        if job.unique_key is not None:
            raise ValidationError(f"kind {kind!r} has a concurrency limit: it cannot be"
                                  " enqueued unique (not supported yet)")
        stamp(job, spec.concurrency)
    return job


def _with_unique(unique: Any, job: NewJob) -> NewJob:
    if unique is None:
        return job
    if not isinstance(unique, Unique):
        raise ValidationError(f"unique must be a kiln.Unique or None, got {unique!r}")
    if job.depends_on:
        raise ValidationError("a unique job cannot have depends_on: enqueue it without")
    job.unique_key = unique.key_of(job.kind, job.queue, job.args)
    job.unique_states = unique.mask
    job.unique_period = unique.period_seconds
    return job


def _results(ids: Sequence[int]) -> list[EnqueueResult]:
    """The store's ids as EnqueueResults (unique jobs come back as such already)."""
    new = int.__new__  # an inserted job's result: no per-result attribute to set
    return [i if i.__class__ is EnqueueResult else new(EnqueueResult, i) for i in ids]


def check_names(jobs: Sequence[NewJob]) -> None:
    """The names of jobs built without ``build_job`` (a NewJob made by hand) follow the
    same rule, so no producer can store a name the others would refuse."""
    for kind, queue, rate_key in {(job.kind, job.queue, job.rate_key) for job in jobs}:
        v.check_name("kind", kind)
        v.check_name("queue", queue)
        if rate_key is not None:
            v.check_name("rate_key", rate_key)
    for job in jobs:
        if job.tags:
            job.tags = check_tags(job.tags)


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


def filter_of(
    ids: Iterable[int] = (),
    state: JobState | str | Sequence[JobState | str] | None = None,
    queue: str | None = None,
    kind: str | None = None,
    error: str | None = None,
    max_id: int | None = None,
    finished_before: datetime | None = None,
    tags: Iterable[str] = (),
    metadata: Mapping[str, Any] | None = None,
    args: Mapping[str, Any] | None = None,
    **unknown: Unpack[NoMoreKeys],
) -> JobFilter:
    if unknown:  # only from untyped callers (a dict of a form's fields, say)
        raise ValidationError(
            f"unknown filter key(s): {', '.join(sorted(unknown))}; use {', '.join(FILTER_KEYS)}"
        )
    states: tuple[JobState, ...] = ()
    if state is not None:
        raw = [state] if isinstance(state, str | JobState) else list(state)
        try:
            states = tuple(JobState(s) for s in raw)
        except ValueError as exc:
            valid = ", ".join(s.value for s in JobState)
            raise ValidationError(f"unknown state in {raw!r}: use one of {valid}") from exc
    id_list = tuple(ids)
    if any(isinstance(i, bool) or not isinstance(i, int) for i in id_list):
        raise ValidationError(f"job ids must be whole numbers, got {list(id_list)!r}")
    id_list = tuple(int(i) for i in id_list)  # plain ints: EnqueueResults mixed in too
    if max_id is not None and (isinstance(max_id, bool) or not isinstance(max_id, int)):
        raise ValidationError(f"max_id must be a whole number, got {max_id!r}")
    if finished_before is not None and finished_before.tzinfo is None:
        raise ValidationError("finished_before must be timezone-aware, got a naive datetime")
    return JobFilter(states=states, queue=queue, kind=kind, error_contains=error, ids=id_list,
                     max_id=max_id, finished_before=finished_before,
                     tags=check_tags(tags, "the tags filter") if tags else (),
                     metadata=check_pairs(metadata, "metadata") if metadata else {},
                     args=check_pairs(args, "args") if args else {})


FILTER_KEYS = ("ids", "state", "queue", "kind", "error", "tags", "metadata", "args", "max_id",
               "finished_before")


class Client(FleetReads):
    """Enqueue, admin and reads over one database. Async methods; ``enqueue_sync`` for
    sync code. ``App.client()`` gives the client of the running event loop; a service
    that holds no handlers builds one with ``Client.from_url(url)``."""

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
        self.bus = bus if not store.capabilities.listen_notify else None
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
        ``limited`` False: without its concurrency key (a template, kiln._batch)."""
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

    async def insert_many(
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

    def insert_many_sync(
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

    async def enqueue(
        self, kind: str, args: Any = None, *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        """Insert one job; its id, with ``.inserted`` False for a unique job's duplicate."""
        await self.catalog.ensure((kind,))
        return (await self.insert_many([self.build(kind, args, **options)], conn))[0]

    def enqueue_sync(
        self, kind: str, args: Any = None, *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        self.catalog.ensure_sync((kind,))
        return self.insert_many_sync([self.build(kind, args, **options)], conn)[0]

    async def enqueue_chain(
        self, steps: Sequence[tuple[str, Any]], **options: Unpack[EnqueueOptions]
    ) -> list[int]:
        """Enqueue jobs that run one after another: each depends on the one before."""
        ids: list[int] = []
        for kind, args in steps:
            extra = options.copy()
            if ids:
                extra["depends_on"] = [ids[-1]]
            ids.append(await self.enqueue(kind, args, **extra))
        return ids

    async def enqueue_fan_in(
        self, parts: Sequence[tuple[str, Any]], then: tuple[str, Any],
        **options: Unpack[EnqueueOptions],
    ) -> tuple[builtins.list[EnqueueResult], EnqueueResult]:
        """Enqueue ``parts`` and one job that runs after all of them complete."""
        if "depends_on" in options:
            raise ValidationError("enqueue_fan_in sets depends_on itself: the final job"
                                  " depends on the parts")
        await self.catalog.ensure(k for k, _a in parts)
        ids = await self.insert_many([self.build(k, a, **options) for k, a in parts])
        last = options.copy()
        last["depends_on"] = ids
        final = await self.enqueue(then[0], then[1], **last)
        return ids, final

    # admin ---------------------------------------------------------------------
    async def get(self, job_id: int) -> JobRow | None:
        return await self._store.job_get(job_id)

    async def list(
        self, filter: JobFilter, limit: int = 50, before_id: int | None = None,
        after_id: int | None = None,
    ) -> builtins.list[JobRow]:
        """Jobs matching ``filter``, newest first (below ``before_id``), or oldest first
        above ``after_id`` (0 for the first page)."""
        if not 1 <= limit <= 1000:
            raise ValidationError(f"limit must be between 1 and 1000, got {limit}")
        if before_id is not None and after_id is not None:
            raise ValidationError("give before_id or after_id, not both")
        return await self._store.job_list(check_filter(filter), limit, before_id, after_id)

    async def count(self, filter: JobFilter) -> int:
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
        n = await self._store.jobs_delete(check_filter(filter))
        await self._audit(actor, "delete", n, filter)
        return n

    async def _audit(self, actor: str, action: str, n: int, f: JobFilter) -> None:
        await self._store.audit_record(actor, action, n, audit_detail(f))

    # queue controls (kiln._queues) -----------------------------------------------
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

    async def queues(self) -> builtins.list[_queues.QueueState]:
        """Every known queue: paused or not, concurrency per server, jobs by state."""
        return await _queues.states(self._store)


def audit_detail(f: JobFilter) -> dict[str, Any]:
    """What an audit entry of an admin action over ``f`` records of the filter."""
    detail = {k: val for k, val in dataclasses.asdict(f).items() if val not in ((), None, {})}
    detail["states"] = [s.value for s in f.states]
    detail["ids"] = builtins.list(f.ids)[:100]
    if f.finished_before is not None:
        detail["finished_before"] = f.finished_before.isoformat()
    detail["at"] = time.time()
    return detail


def _one(index: int, fin: EnqueueFinisher) -> BatchFinisher:
    def finish(ids: Sequence[int] | None, error: BaseException | None) -> None:
        fin(ids[index] if ids else None, error)

    return finish
