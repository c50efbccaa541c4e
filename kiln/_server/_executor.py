"""Executor: runs one attempt of a job and turns what happened into a JobResult.

Owns timeouts, middleware, the sync/async split and the retry decision. It does not
claim, write results or decide shutdown: the pool and the server do.

A job cancelled while it runs (``request_cancel``, from kiln._server._canceller) ends as
cancelled however its handler ends: an ``async def`` handler's task is cancelled, a
plain ``def`` handler sees ``job.cancelled`` set (it cannot be interrupted, see
kiln._server._sync); what it returns or raises then changes nothing, and the result, fenced off
by the cancel in the database, only ends the attempt there.

Anything an attempt raises is a failed attempt with its error recorded, BaseException
subclasses included (``sys.exit()`` in a handler, a failing backoff): a hand-back never
uses an attempt, so it happens only when the server shuts down or fences itself, never
for an error that would come back on the next run.

A handler's return value other than None (and Snooze, Cancel or Fail) is its stored result:
it is checked here (kiln._model._results), so one that cannot be stored is a failed attempt
whose error says why, retried per the kind's policy, and nothing of it is written.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kiln._errors import ResultError, Shutdown
from kiln._events import EventHub, JobCancelled, JobFinished, JobStarted
from kiln._model._job import AttemptError, JobResult, JobRow, Outcome
from kiln._model._kinds import Kind
from kiln._model._outcomes import Cancel, Fail, Snooze
from kiln._model._results import encoded
from kiln._model._retry import DEFAULT_BACKOFF, Backoff, backoff_from_json
from kiln._server._config import ServerConfig
from kiln._server._deadlines import Deadlines
from kiln._server._handle import Job
from kiln._server._identity import Identity
from kiln._server._logs import CURRENT_JOB
from kiln._server._sync import SyncRunner
from kiln._server._threads import ThreadPool

Next = Callable[[], Awaitable[Any]]
Middleware = Callable[[Job, Next], Awaitable[Any]]
ParamWriter = Callable[[JobRow, str, Any], Awaitable[bool]]
# seconds since the job of this attempt was cancelled, None when it was not
CancelAge = Callable[[JobRow], Awaitable[float | None]]
ResultsReader = Callable[[int], Awaitable[dict[int, Any]]]


CANCEL_REQUESTED = "kiln: job cancelled"  # the cancel message of a cancelled job's task


class Executor:
    def __init__(
        self,
        *,
        kinds: Mapping[str, Kind],
        config: ServerConfig,
        events: EventHub,
        threads: ThreadPool,
        identity: Identity,
        write_param: ParamWriter,
        middleware: list[Middleware],
        cancel_age: CancelAge | None = None,
        read_results: ResultsReader | None = None,
    ) -> None:
        self._kinds = kinds
        self._cancel_age = cancel_age
        self._config = config
        self._events = events
        self._threads = threads
        self._identity = identity
        self._write_param = write_param
        self._middleware = middleware
        self._read_results = read_results
        self._is_async = {name: kind.is_async for name, kind in kinds.items()}
        self._max_result = {
            name: kind.max_result_bytes or config.max_result_bytes for name, kind in kinds.items()
        }
        self._deadlines = Deadlines()
        self.sync = SyncRunner(threads, self._deadlines, float(config.kill_grace))
        self._loop: asyncio.AbstractEventLoop | None = None
        self.shutting_down = False
        self._live: dict[asyncio.Task[Any], Job] = {}  # tasks inside an attempt's handler
        self._requests: dict[asyncio.Task[Any], float] = {}  # task -> when its job was cancelled
        # attempts cancelled before their handler started (claimed ahead, or their task
        # not in the handler yet): (job id, attempt) -> when (monotonic); the canceller
        # replaces it at every look, so it holds no more than the pools' claimed rows
        self.cancelled_early: dict[tuple[int, int], float] = {}

    def request_cancel(self, task: asyncio.Task[Any], requested_at: float) -> bool:
        """The job of the attempt ``task`` runs was cancelled (at ``requested_at``, on the
        monotonic clock): interrupt its handler. False when ``task`` is not inside a
        handler (it has not started one yet, or is past it) or was asked already."""
        job = self._live.get(task)
        if job is None or task in self._requests:
            return False
        self._requests[task] = requested_at
        job.cancelled.set()  # before the task's cancel: a handler may look at either
        task.cancel(msg=CANCEL_REQUESTED)
        return True

    def timeout_of(self, row: JobRow, kind: Kind) -> float:
        return float(row.timeout or kind.timeout or self._config.timeout)

    def backoff_of(self, row: JobRow, kind: Kind) -> Backoff:
        return backoff_from_json(row.backoff) or kind.backoff or DEFAULT_BACKOFF

    async def run(self, row: JobRow) -> JobResult:
        """Run one attempt in the current task (the pool's task for this job)."""
        kind = self._kinds[row.kind]
        loop = self._loop
        if loop is None:  # looked up once: on Python 3.11 each lookup is a getpid() call
            loop = self._loop = asyncio.get_running_loop()
        job: Job = Job(row, self._write_param, loop, self._read_results, kind.args_type)
        CURRENT_JOB.set(row)  # this task runs this attempt only: log lines name the job
        events = self._events
        if events.wants(JobStarted):
            events.emit(JobStarted(job=row))
        task: asyncio.Task[Any] = asyncio.current_task(loop)  # type: ignore[assignment]
        deadlines = self._deadlines
        timeout = self.timeout_of(row, kind)
        started = time.monotonic()
        error: BaseException | None = None
        value: Any = None
        is_async = self._is_async[row.kind]
        if is_async:  # a sync job's timeout starts when its thread starts it (SyncRunner)
            deadlines.add(task, timeout)
        self._live[task] = job
        try:
            if self._middleware or not is_async:
                value = await self._call(kind, job, task, timeout)
            else:
                value = await kind.handler(job)
        except asyncio.CancelledError as exc:
            error = self._cancelled(task, job, timeout, exc)
        except BaseException as exc:  # sys.exit() in a handler is a failed attempt too
            error = exc
            if self.shutting_down and task.cancelling():  # raised because of the cancel
                error = _shutdown(exc)
        finally:
            requested = self._ended(task)
        stored = None
        if error is None and isinstance(value, Fail):  # returned, not raised: the same
            error = value
        if value is not None and error is None and not isinstance(value, Snooze | Cancel):
            try:  # checked here, so a result that cannot be stored is a failed attempt
                stored = encoded(value, self._max_result[row.kind], row.id, row.kind)
            except ResultError as exc:
                error = exc
        result, error = await self._outcome(row, kind, job, value, error, requested, stored)
        if events.wants(JobFinished):
            events.emit(
                JobFinished(
                    job=row, outcome=result.outcome, duration=time.monotonic() - started,
                    error=error,
                    retry_in=result.run_at_delay if result.outcome is Outcome.RETRY else None,
                )
            )
        return result

    def cancelled_before_start(self, row: JobRow) -> JobResult | None:
        """The result of an attempt cancelled while it waited for its handler (claimed
        ahead, say): cancelled, its handler never run. None for any other attempt."""
        requested = self.cancelled_early.pop((row.id, row.attempt), None)
        if requested is None:
            return None
        self._stopped(row, requested)
        if self._events.wants(JobFinished):
            self._events.emit(JobFinished(job=row, outcome=Outcome.CANCELLED, duration=0.0,
                                          error=None))
        return self._made(row, Outcome.CANCELLED, None)

    def _ended(self, task: asyncio.Task[Any]) -> float | None:
        """The handler of ``task`` ended: settle its cancels; when its job was cancelled
        meanwhile, return when (monotonic)."""
        del self._live[task]
        if self._deadlines.discard(task):  # expired, but the handler ended otherwise first:
            task.uncancel()  # its outcome stands, as with asyncio.timeout
        requested = self._requests.pop(task, None) if self._requests else None
        if requested is not None:
            task.uncancel()
        return requested

    async def _outcome(
        self, row: JobRow, kind: Kind, job: Job, value: Any, error: BaseException | None,
        requested: float | None, stored: str | None = None,
    ) -> tuple[JobResult, BaseException | None]:
        """The attempt's result and error; a cancelled job's attempt is cancelled, however
        its handler ended (a refused checkpoint may have ended it before any look)."""
        if requested is None and job.refused and self._cancel_age is not None:
            requested = await self._cancelled_before(row)
        if requested is None:
            return self._result(row, kind, value, error, stored), error
        self._stopped(row, requested)
        return self._made(row, Outcome.CANCELLED, None), None

    def _cancelled(
        self, task: asyncio.Task[Any], job: Job, timeout: float, exc: asyncio.CancelledError
    ) -> BaseException:
        """The error of an attempt that raised CancelledError; re-raises a cancellation
        by the server outside shutdown (fencing: the server decides what happens)."""
        if task in self._requests:  # the job was cancelled: run() makes the result
            if self._deadlines.discard(task):
                task.uncancel()
            job.cancelled.set()
            return exc
        if self._deadlines.discard(task):
            task.uncancel()
            job.cancelled.set()
            return _timed_out(timeout, exc)
        if not task.cancelling():  # raised by the handler, not a cancellation of this task
            return exc
        job.cancelled.set()
        if not self.shutting_down:
            raise exc
        return _shutdown(exc)

    async def _cancelled_before(self, row: JobRow) -> float | None:
        """A checkpoint was refused, so the handler stopped (FencedError) before the
        server looked for cancels: when the job was cancelled, when (monotonic)."""
        assert self._cancel_age is not None
        try:
            age = await self._cancel_age(row)
        except Exception:  # unknown: the attempt's own outcome stands (fenced anyway)
            return None
        return None if age is None else time.monotonic() - age

    def _stopped(self, row: JobRow, requested: float) -> None:
        if self._events.wants(JobCancelled):
            latency = max(time.monotonic() - requested, 0.0)
            stuck = self.sync.gave_up(row.id, row.attempt)
            self._events.emit(JobCancelled(job=row, latency=latency, stuck=stuck))

    async def _call(self, kind: Kind, job: Job, task: asyncio.Task[Any], timeout: float) -> Any:
        async def call_handler() -> Any:
            if self._is_async[kind.name]:
                return await kind.handler(job)
            assert self._loop is not None
            return await self.sync.call(kind, job, task, timeout, self._loop)

        if not self._middleware:
            return await call_handler()
        call: Next = call_handler
        for middleware in reversed(self._middleware):
            call = _bind(middleware, job, call)
        return await call()

    def _result(
        self, row: JobRow, kind: Kind, value: Any, error: BaseException | None,
        stored: str | None = None,
    ) -> JobResult:
        if error is None and value is None:  # the common case: completed
            return JobResult(row.id, row.server_id or self._identity.id, row.attempt,
                             Outcome.COMPLETED)
        stuck = self.sync.gave_up(row.id, row.attempt)
        if isinstance(error, Shutdown) and self.shutting_down:
            why = f"{_describe(error)}; {_STILL_RUNNING}" if stuck else None
            return self._made(row, Outcome.HANDED_BACK, error, why=why)
        if isinstance(error, Fail):  # failed for good, whatever attempts remain
            why = f"Fail: {error.reason}" + (f"; {_STILL_RUNNING}" if stuck else "")
            return self._made(row, Outcome.FAILED, error, why=why)
        if error is not None:
            why = _describe(error) + (f"; {_STILL_RUNNING}" if stuck else "")
            if row.attempt >= row.max_attempts:
                return self._made(row, Outcome.FAILED, error, why=why)
            delay, why = self._delay(row, kind, why)
            return self._made(row, Outcome.RETRY, error, delay, why)
        if isinstance(value, Snooze):
            return self._made(row, Outcome.SNOOZED, None, value.seconds)
        if isinstance(value, Cancel):
            return self._made(row, Outcome.CANCELLED, None, why=f"Cancel: {value.reason}")
        return JobResult(row.id, row.server_id or self._identity.id, row.attempt,
                         Outcome.COMPLETED, result=stored)

    def _delay(self, row: JobRow, kind: Kind, why: str) -> tuple[float, str]:
        """The backoff's wait after this attempt; should the backoff fail (a list shorter
        than max_attempts, a bad value), the default backoff's, and the record says so."""
        try:
            delay = float(self.backoff_of(row, kind).wait(row.attempt))
            if math.isfinite(delay) and delay >= 0:
                return delay, why
            problem = f"it returned {delay!r}"
        except Exception as exc:
            problem = f"it raised {_describe(exc)}"
        delay = DEFAULT_BACKOFF.wait(row.attempt)
        return delay, f"{why} (the job's backoff failed: {problem}; waited {delay:.3g}s " \
            "by the default backoff instead)"

    def crashed(self, row: JobRow, error: BaseException) -> JobResult:
        """kiln's own per-job code raised around an attempt: a failed attempt with its
        error recorded, with the default backoff (never a hand-back, which would loop)."""
        why = f"kiln failed while running this attempt: {_describe(error)}"
        if row.attempt >= row.max_attempts:
            return self._made(row, Outcome.FAILED, error, why=why)
        return self._made(row, Outcome.RETRY, error, DEFAULT_BACKOFF.wait(row.attempt), why)

    def _made(
        self, row: JobRow, outcome: Outcome, error: BaseException | None, delay: float = 0.0,
        why: str | None = None,
    ) -> JobResult:
        record = None
        if why is not None:
            record = AttemptError(
                attempt=row.attempt, at=time.time(), error=why, server_id=self._identity.id,
                traceback="" if error is None else _traceback(error),
                due_at=row.run_at.timestamp(),
                started_at=None if row.attempted_at is None else row.attempted_at.timestamp(),
            )
        return JobResult(
            job_id=row.id, server_id=row.server_id or self._identity.id, attempt=row.attempt,
            outcome=outcome, run_at_delay=delay, error=record, claimed_at=row.attempted_at,
        )


_STILL_RUNNING = (
    "its handler (a plain def, which cannot be interrupted) was still running after "
    "kill_grace, and may have gone on running after this record"
)


def _describe(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"
    except Exception:  # a __str__ that raises must not lose the attempt
        return f"{type(error).__name__}: <unprintable>"


def _traceback(error: BaseException) -> str:
    try:
        return "".join(traceback.format_exception(error))  # capped in kiln._model._sanitise
    except Exception:
        return f"{type(error).__name__}: <traceback unavailable>"


def _shutdown(cause: BaseException) -> Shutdown:
    error = Shutdown("cancelled by server shutdown")
    error.__cause__ = cause
    return error


def _timed_out(timeout: float, cause: BaseException) -> TimeoutError:
    error = TimeoutError(f"job timed out after {timeout:g}s")
    error.__cause__ = cause
    return error


def _bind(middleware: Middleware, job: Job, call: Next) -> Next:
    return lambda: middleware(job, call)
