"""The worker's log lines about its jobs, written from the events the server emits.

Owns ``JobLog``, an inline subscriber of a server's EventHub (the server subscribes it;
it adds no log call to the pool, executor or completer): one line for every attempt
that failed and will run again (kind, id, attempt/max, error type and message, when it
runs next), every job that failed for good (with its traceback), every rescue, hand-back,
cancel and reconcile, and the shutdown wait ("waiting up to 30s for 1 running job:
export.run #621"). A fence is logged where it happens (kiln.heartbeat).

Each event has a logger of its own under ``kiln.jobs`` (``kiln.jobs.retry``,
``kiln.jobs.failed``, ``kiln.jobs.rescued``, ``kiln.jobs.handed_back``,
``kiln.jobs.cancelled``, ``kiln.jobs.reconciled``) or ``kiln.server.shutdown``, all at
INFO, so a user tunes one event with the logging module
(``logging.getLogger("kiln.jobs.retry").setLevel(logging.WARNING)``). A line never
carries the job's args; it carries the job (``job_id``, ``job_kind``, ``queue``,
``attempt``) and the server (``server_id``) as record attributes, which the formatters
print. A completed attempt costs one dict lookup.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kiln._events import (
    Event,
    JobCancelled,
    JobFinished,
    JobReconciled,
    JobRescued,
    ServerStopping,
)
from kiln._model._job import JobRow, Outcome

RETRY = logging.getLogger("kiln.jobs.retry")
FAILED = logging.getLogger("kiln.jobs.failed")
RESCUED = logging.getLogger("kiln.jobs.rescued")
HANDED_BACK = logging.getLogger("kiln.jobs.handed_back")
CANCELLED = logging.getLogger("kiln.jobs.cancelled")
RECONCILED = logging.getLogger("kiln.jobs.reconciled")
SHUTDOWN = logging.getLogger("kiln.server.shutdown")
SHOWN = 5  # running jobs named in the shutdown line; the rest are counted


def _job(row: JobRow) -> str:
    return f"{row.kind} #{row.id}"


def _context(row: JobRow) -> dict[str, Any]:
    return {"job_id": row.id, "job_kind": row.kind, "queue": row.queue,
            "attempt": row.attempt, "server_id": row.server_id}


def _error(error: BaseException | None) -> str:
    if error is None:
        return "no error recorded"
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class JobLog:
    """Subscribe to a server's hub: ``hub.subscribe(JobLog())``."""

    __slots__ = ("_handlers", "event_types")

    def __init__(self) -> None:
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            JobFinished: self._finished,
            JobRescued: self._rescued,
            JobCancelled: self._cancelled,
            JobReconciled: self._reconciled,
            ServerStopping: self._stopping,
        }
        self.event_types = frozenset(self._handlers)

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _finished(self, e: JobFinished) -> None:
        outcome = e.outcome
        if outcome is Outcome.COMPLETED or outcome is Outcome.SNOOZED:
            return
        row = e.job
        if outcome is Outcome.RETRY:
            if RETRY.isEnabledFor(logging.INFO):
                when = f"in {e.retry_in:.1f}s" if e.retry_in is not None else "after backoff"
                RETRY.info("job %s attempt %d/%d failed: %s; runs again %s", _job(row),
                           row.attempt, row.max_attempts, _error(e.error), when,
                           extra=_context(row))
        elif outcome is Outcome.FAILED:
            if FAILED.isEnabledFor(logging.INFO):
                error = e.error
                trace = (type(error), error, error.__traceback__) if error is not None else None
                FAILED.info("job %s failed for good on attempt %d/%d: %s", _job(row),
                            row.attempt, row.max_attempts, _error(error),
                            exc_info=trace, extra=_context(row))
        elif outcome is Outcome.HANDED_BACK:
            HANDED_BACK.info("job %s handed back to queue %s without using its attempt "
                             "%d/%d (%s)", _job(row), row.queue, row.attempt,
                             row.max_attempts, _error(e.error) if e.error else "shutdown",
                             extra=_context(row))
        elif outcome is Outcome.CANCELLED:
            CANCELLED.info("job %s cancelled on attempt %d/%d: %s", _job(row), row.attempt,
                           row.max_attempts, _error(e.error) if e.error else "by its handler",
                           extra=_context(row))

    def _rescued(self, e: JobRescued) -> None:
        row = e.job
        what = ("runs again" if e.outcome is Outcome.RETRY
                else f"failed for good, no attempt left of {row.max_attempts}")
        RESCUED.info("job %s of dead server %s rescued on attempt %d: %s", _job(row),
                     e.dead_server_id, row.attempt, what, extra=_context(row))

    def _cancelled(self, e: JobCancelled) -> None:
        row = e.job
        how = ("its plain def handler still runs" if e.stuck
               else "its handler ended")
        CANCELLED.info("job %s cancelled while running: %s %.2fs after the cancel",
                       _job(row), how, e.latency, extra=_context(row))

    def _reconciled(self, e: JobReconciled) -> None:
        done = ("handed back to its queue" if e.action == "handed_back"
                else "its result written again")
        RECONCILED.info("job %s #%d attempt %d reconciled: the database said this server "
                        "runs it, and it did not; %s", e.kind, e.job_id, e.attempt, done,
                        extra={"job_id": e.job_id, "job_kind": e.kind, "queue": e.queue,
                               "attempt": e.attempt})

    def _stopping(self, e: ServerStopping) -> None:
        running = e.running
        if not running:
            return
        named = ", ".join(_job(row) for row in running[:SHOWN])
        more = f" and {len(running) - SHOWN} more" if len(running) > SHOWN else ""
        noun = "job" if len(running) == 1 else "jobs"
        SHUTDOWN.info("server %s: waiting up to %gs for %d running %s: %s%s", e.server_id,
                      e.timeout, len(running), noun, named, more,
                      extra={"server_id": e.server_id})
