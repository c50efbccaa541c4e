"""drain: run an app's due jobs inline, one at a time, through the real executor.

What a server's pool does for one job, without the pool's concurrency and timing:
release what is due (and, with ``with_scheduled``, first make scheduled jobs due and
admit the retries of rate-limited ones; with ``lift_rate_limits``, every rate-limited
job), admit rate-limited jobs through the admitter, claim one job, run it with the
server's Executor (middleware, timeouts, events, the retry decision), write its
result with the store's fencing (which releases dependents), and again, until no job
the drain may run is due. Owns no SQL and no decision about outcomes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kiln._app import App
from kiln._errors import KilnError, ValidationError
from kiln._events import EventHub, JobClaimed, JobFinished
from kiln._model._job import JobFilter, JobResult, JobRow, JobState, Outcome, ServerInfo
from kiln._model._kinds import Kind
from kiln._server._config import ServerConfig
from kiln._server._context import ServerContext
from kiln._server._executor import Executor
from kiln._server._identity import Identity
from kiln._server._threads import ThreadPool
from kiln._server.maintenance.admitter import Admitter
from kiln._version import VERSION
from kiln.stores import Store
from kiln.testing import _loop

Names = str | Sequence[str] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """One attempt a drain ran: the job as claimed, how it ended, what it raised, and
    for a completed attempt what it returned, as stored (read back from its JSON: a tuple
    comes back a list; None when it returned None or did not complete)."""

    job: JobRow
    outcome: Outcome
    error: BaseException | None
    duration: float  # seconds
    result: Any = None


@dataclasses.dataclass(slots=True)
class Drained:
    """What a drain ran, attempt by attempt, and the counts by outcome."""

    runs: list[Run] = dataclasses.field(default_factory=list)
    # rate-limited jobs of the drained kinds still pending (not admitted) when it ended
    held: int = 0

    def count(self, outcome: Outcome | str) -> int:
        return sum(1 for r in self.runs if r.outcome == outcome)

    @property
    def completed(self) -> int:
        return self.count(Outcome.COMPLETED)

    @property
    def retried(self) -> int:
        return self.count(Outcome.RETRY)

    @property
    def failed(self) -> int:
        return self.count(Outcome.FAILED)

    @property
    def snoozed(self) -> int:
        return self.count(Outcome.SNOOZED)

    @property
    def cancelled(self) -> int:
        return self.count(Outcome.CANCELLED)

    @property
    def results(self) -> list[Any]:
        """What each completed attempt returned (as stored), in the order they ran."""
        return [r.result for r in self.runs if r.outcome is Outcome.COMPLETED]

    @property
    def errors(self) -> list[BaseException]:
        return [r.error for r in self.runs if r.error is not None]

    def __len__(self) -> int:
        return len(self.runs)

    def __repr__(self) -> str:
        counts = ", ".join(f"{o.value}={self.count(o)}" for o in Outcome if self.count(o))
        held = (f"; {self.held} held by rate limits (drain(lift_rate_limits=True) runs them)"
                if self.held else "")
        return f"<Drained {len(self.runs)} attempts{': ' + counts if counts else ''}{held}>"


def names_of(what: str, value: Names) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else tuple(value)
    if not all(isinstance(n, str) for n in names):
        raise ValidationError(f"{what} must be a name or a list of names, got {value!r}")
    return names


def kinds_of(app: App, kinds: Names) -> dict[str, Kind]:
    names = names_of("kinds", kinds)
    if names is None:
        return dict(app.kinds)
    missing = [n for n in names if n not in app.kinds]
    if missing:
        known = ", ".join(sorted(app.kinds)) or "none"
        raise ValidationError(
            f"cannot drain kind(s) {', '.join(map(repr, missing))}: the app has no handler"
            f" for them (its kinds: {known})"
        )
    return {n: app.kinds[n] for n in names}


async def adrain(
    app: App, kinds: Names = None, max_jobs: int | None = None, *, queues: Names = None,
    with_scheduled: bool = False, raise_errors: bool = False, events: EventHub | None = None,
    lift_rate_limits: bool = False,
) -> Drained:
    """Run ``app``'s due jobs on the running loop until none is due; see ``drain``."""
    chosen = kinds_of(app, kinds)
    if max_jobs is not None and (isinstance(max_jobs, bool) or not isinstance(max_jobs, int)
                                 or max_jobs < 0):
        raise ValidationError(f"max_jobs must be a whole number of at least 0, got {max_jobs!r}")
    drained = Drained()
    if not chosen or max_jobs == 0:
        return drained
    store = app.new_store()
    await store.open()
    try:
        await store.schema_check()
        drainer = _Drainer(app, store, chosen, names_of("queues", queues), events,
                           lift_rate_limits)
        await drainer.run(drained, max_jobs, with_scheduled, raise_errors)
    finally:
        await store.close()
    return drained


class _Drainer:
    def __init__(self, app: App, store: Store, kinds: dict[str, Kind],
                 queues: tuple[str, ...] | None, events: EventHub | None,
                 lift_rate_limits: bool = False) -> None:
        self._store = store
        self._lifted = lift_rate_limits
        self._kinds = kinds
        self._queues = queues
        self._events = events if events is not None else EventHub()
        self._config = ServerConfig()
        self.server_id = f"kiln-testing-{uuid.uuid4().hex[:12]}"
        self._threads = ThreadPool(1, name="kiln-testing-sync")
        self._identity = Identity(self._info())  # a drain never rejoins
        self._executor = Executor(
            kinds=kinds, config=self._config, events=self._events, threads=self._threads,
            identity=self._identity, write_param=self._write_param,
            middleware=list(app.middleware), read_results=store.job_dependency_results,
        )
        self._admitter = Admitter(ServerContext(
            store=store, config=self._config, events=self._events, kinds=kinds,
            identity=self._identity, leader_since=lambda: None,
            wake=lambda _released, _reason: None,
        ), ahead=0.0)  # admitted ahead, a job would be scheduled: a drain runs what is due
        self._finished: dict[tuple[int, int], BaseException | None] = {}

    async def run(self, drained: Drained, max_jobs: int | None, with_scheduled: bool,
                  raise_errors: bool) -> None:
        unsubscribe = self._events.subscribe(self._on_finished, types=(JobFinished,))
        self._events.start()
        try:
            await self._store.server_register(self._identity.info)
            while max_jobs is None or len(drained) < max_jobs:
                row = await self._next(with_scheduled)
                if row is None:
                    drained.held = await self._held()
                    return
                run = await self._run(row)
                drained.runs.append(run)
                if raise_errors and run.error is not None:
                    raise run.error
        finally:
            unsubscribe()
            self._threads.shutdown()
            with contextlib.suppress(KilnError):  # never hides why the drain stopped
                await self._store.server_deregister(self.server_id)
            await _flush(self._events)

    async def _held(self) -> int:
        """The drained kinds' jobs still pending: their rate limits have not admitted them."""
        return sum(n for kind, state, n in await self._store.job_counts_by_kind()
                   if state is JobState.PENDING and kind in self._kinds)

    def _info(self) -> ServerInfo:
        host = socket.gethostname()
        return ServerInfo(
            id=self.server_id, host=host, pid=os.getpid(),
            queues={q: 1 for q in self._queues or sorted({k.queue for k in self._kinds.values()})},
            kinds=sorted(self._kinds), version=VERSION, started_at=datetime.now(UTC),
        )

    def _on_finished(self, event: Any) -> None:
        self._finished[(event.job.id, event.job.attempt)] = event.error

    async def _next(self, with_scheduled: bool) -> JobRow | None:
        """Make due what is due (or all, with_scheduled), then claim one job."""
        store = self._store
        if with_scheduled or self._lifted:
            for kind in self._kinds:
                for queue in self._queues or (None,):
                    found = JobFilter(kind=kind, queue=queue)
                    if with_scheduled:
                        await store.jobs_make_due(found)
                    # a retry was admitted once: with_scheduled runs it without waiting
                    # for its key's limit again; lift_rate_limits runs every one at once
                    await store.jobs_admit_lifted(found, retries_only=not self._lifted)
        await store.jobs_release_due()
        await self._admitter.run_once()
        counts = await store.job_counts()
        ready = sorted({c.queue for c in counts if c.state is JobState.AVAILABLE and c.count})
        for queue in ready:
            if self._queues is not None and queue not in self._queues:
                continue
            # limited: jobs under a concurrency limit are claimed too, under its rule
            rows = await store.job_claim(queue, sorted(self._kinds), 1, self.server_id,
                                         limited=True)
            if rows:
                row = rows[0]
                if self._events.wants(JobClaimed):
                    latency = (row.attempted_at or row.run_at) - row.run_at
                    self._events.emit(JobClaimed(job=row, latency=max(latency.total_seconds(),
                                                                      0.0)))
                return row
        return None

    async def _run(self, row: JobRow) -> Run:
        began = time.monotonic()
        # a task of its own, as in a pool: a timeout cancels the job, never the caller
        task = asyncio.get_running_loop().create_task(self._attempt(row), name=f"kiln-job-{row.id}")
        result, crash = await task
        await self._store.job_results_apply([result])
        error = crash or self._finished.pop((row.id, row.attempt), None)
        stored = None
        if result.outcome is Outcome.COMPLETED and result.result is not None:
            stored = json.loads(result.result)  # what a reader of the store gets back
        return Run(job=row, outcome=result.outcome, error=error,
                   duration=time.monotonic() - began, result=stored)

    async def _attempt(self, row: JobRow) -> tuple[JobResult, BaseException | None]:
        try:
            return await self._executor.run(row), None
        except Exception as exc:  # kiln's own per-job code failed: a failed attempt
            return self._executor.crashed(row, exc), exc

    async def _write_param(self, row: JobRow, name: str, value: Any) -> bool:
        return await self._store.job_param_set(row.id, self.server_id, row.attempt, name, value)


async def _flush(events: EventHub, timeout: float = 2.0) -> None:
    """Let queued subscribers take what the drain emitted, then stop their tasks."""
    deadline = time.monotonic() + timeout
    while any(q.qsize() for _fn, q, _types in events._queued) and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0)  # the last one taken may still be in its subscriber
    await events.stop()


def drain(
    app: App, kinds: Names = None, max_jobs: int | None = None, *, queues: Names = None,
    with_scheduled: bool = False, raise_errors: bool = False, events: EventHub | None = None,
    lift_rate_limits: bool = False,
) -> Drained:
    """Run ``app``'s due jobs inline, one at a time, until none it may run is due.

    ``kinds``/``queues`` limit what runs; ``max_jobs`` caps the attempts;
    ``with_scheduled`` makes scheduled jobs (delays, backoffs, snoozes) due at once, and
    runs the retries of rate-limited jobs without waiting for their limit again;
    ``lift_rate_limits`` admits every rate-limited job at once (a backlog runs to the
    end); otherwise a rate-limited job runs when its limit admits it;
    ``raise_errors`` re-raises the first error an attempt raised; ``events`` receives
    the run's events. The jobs run on kiln.testing's own loop (``adrain`` runs them on
    the caller's)."""
    return _loop.run_for(app, adrain(app, kinds, max_jobs, queues=queues,
                                     with_scheduled=with_scheduled, raise_errors=raise_errors,
                                     events=events, lift_rate_limits=lift_rate_limits))
