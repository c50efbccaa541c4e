"""Executor: runs one attempt of a job and turns what happened into a JobResult.

Owns timeouts, middleware, the sync/async split and the retry decision. It does not
claim, write results or decide shutdown: the pool and the server do.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kiln._config import ServerConfig
from kiln._errors import Shutdown
from kiln._events import EventHub, JobFinished, JobStarted
from kiln._handle import Job
from kiln._job import AttemptError, JobResult, JobRow, Outcome
from kiln._kinds import Kind
from kiln._outcomes import Cancel, Snooze
from kiln._retry import DEFAULT_BACKOFF, Backoff, backoff_from_json
from kiln._threads import ThreadPool

Next = Callable[[], Awaitable[Any]]
Middleware = Callable[[Job, Next], Awaitable[Any]]
ParamWriter = Callable[[JobRow, str, Any], Awaitable[bool]]


class ShutdownCancel:
    """Marker passed as the cancel message when the server cancels on shutdown."""

    MESSAGE = "kiln: server shutting down"


class Executor:
    def __init__(
        self,
        kinds: Mapping[str, Kind],
        config: ServerConfig,
        events: EventHub,
        threads: ThreadPool,
        server_id: str,
        write_param: ParamWriter,
        middleware: list[Middleware],
    ) -> None:
        self._kinds = kinds
        self._config = config
        self._events = events
        self._threads = threads
        self._server_id = server_id
        self._write_param = write_param
        self._middleware = middleware
        self.shutting_down = False

    def timeout_of(self, row: JobRow, kind: Kind) -> float:
        return float(row.timeout or kind.timeout or self._config.timeout)

    def backoff_of(self, row: JobRow, kind: Kind) -> Backoff:
        return backoff_from_json(row.backoff) or kind.backoff or DEFAULT_BACKOFF

    async def run(self, row: JobRow) -> JobResult:
        kind = self._kinds[row.kind]
        job = Job(row, self._write_param, asyncio.get_running_loop())
        self._events.emit(JobStarted(job=row))
        started = time.monotonic()
        error: BaseException | None = None
        value: Any = None
        try:
            async with asyncio.timeout(self.timeout_of(row, kind)):
                value = await self._call(kind, job)
        except TimeoutError as exc:
            job.cancelled.set()
            error = TimeoutError(f"job timed out after {self.timeout_of(row, kind):g}s")
            error.__cause__ = exc
        except asyncio.CancelledError:
            job.cancelled.set()
            if not self.shutting_down:
                raise
            error = Shutdown("cancelled by server shutdown")
        except Exception as exc:
            error = exc
        duration = time.monotonic() - started
        result = self._result(row, kind, value, error)
        self._events.emit(
            JobFinished(
                job=row, outcome=result.outcome, duration=duration, error=error,
                retry_in=result.run_at_delay if result.outcome is Outcome.RETRY else None,
            )
        )
        return result

    async def _call(self, kind: Kind, job: Job) -> Any:
        async def call_handler() -> Any:
            if kind.is_async:
                return await kind.handler(job)
            ctx = contextvars.copy_context()
            future = self._threads.submit(ctx.run, kind.handler, job)
            return await asyncio.wrap_future(future)

        if not self._middleware:
            return await call_handler()
        call: Next = call_handler
        for middleware in reversed(self._middleware):
            call = _bind(middleware, job, call)
        return await call()

    def _result(
        self, row: JobRow, kind: Kind, value: Any, error: BaseException | None
    ) -> JobResult:
        def result(outcome: Outcome, delay: float = 0.0, why: str | None = None) -> JobResult:
            record = None
            if why is not None:
                record = AttemptError(
                    attempt=row.attempt, at=time.time(), error=why, server_id=self._server_id,
                    traceback="" if error is None
                    else "".join(traceback.format_exception(error))[-8000:],
                )
            return JobResult(
                job_id=row.id, server_id=row.server_id or self._server_id, attempt=row.attempt,
                outcome=outcome, run_at_delay=delay, error=record,
            )

        if isinstance(error, Shutdown):
            return result(Outcome.HANDED_BACK)
        if error is not None:
            why = f"{type(error).__name__}: {error}"
            if row.attempt >= row.max_attempts:
                return result(Outcome.FAILED, why=why)
            return result(Outcome.RETRY, self.backoff_of(row, kind).wait(row.attempt), why)
        if isinstance(value, Snooze):
            return result(Outcome.SNOOZED, value.seconds)
        if isinstance(value, Cancel):
            return result(Outcome.CANCELLED, why=f"Cancel: {value.reason}")
        return result(Outcome.COMPLETED)


def _bind(middleware: Middleware, job: Job, call: Next) -> Next:
    return lambda: middleware(job, call)
