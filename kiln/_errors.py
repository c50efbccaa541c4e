"""kiln's error tree. Every error kiln raises on purpose derives from KilnError.

KilnError
├── ConfigError            invalid configuration or option (names field, value, rule)
├── ValidationError        bad input to enqueue or an admin call (names the problem)
│   ├── UnknownKindError   no handler is registered for a kind
│   ├── JobNotFoundError   no job has that id (``client.cancel_job``)
│   ├── JobFinishedError   the job has finished already: nothing to cancel
│   └── UnknownQueueError  a queue control names no known queue (kiln._model._controls)
├── StoreError             the database failed; ``operation`` names the store call
│   ├── UnreachableError   cannot connect
│   └── NotMigratedError   the schema is missing or older than this kiln
├── FencedError            a checkpoint of a job that no longer runs under this server
│                          and attempt (rescued, cancelled, or run again elsewhere)
├── CronError              a malformed cron expression
├── ResultError            a handler returned a value kiln cannot store (not JSON, or
│                          over max_result_bytes): that attempt failed, nothing written
└── Shutdown               raised inside a job that the server cancelled on shutdown

Retry, snooze and cancel are outcomes (see kiln._model._outcomes), not errors.
"""

from __future__ import annotations

from typing import Any


class KilnError(Exception):
    """Root of every error kiln raises."""


class ConfigError(KilnError, ValueError):
    """Invalid configuration or option: ``field``, the ``value`` given, and the
    ``rule`` it breaks."""

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"invalid {field}={value!r}: {rule}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.value, self.rule))


class ValidationError(KilnError, ValueError):
    """Bad input; nothing was written."""


class UnknownKindError(ValidationError):
    """No handler is registered for ``kind`` here and no server has published it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        super().__init__(f"unknown job kind {kind!r}: no handler is registered for it")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kind,))


class JobNotFoundError(ValidationError):
    """No job has ``job_id``: it was deleted or pruned, or never existed."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} not found: it was deleted or pruned, or never existed")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id,))


class JobFinishedError(ValidationError):
    """Job ``job_id`` has finished already (``state``): nothing to cancel."""

    def __init__(self, job_id: int, state: str) -> None:
        self.job_id = job_id
        self.state = state
        super().__init__(f"job {job_id} has finished already ({state}): nothing to cancel")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.state))


class StoreError(KilnError):
    """The database failed; ``operation`` names the store call that failed.

    ``contended``: the database gave up on contention, not on the data: a lock wait or
    statement timeout, a deadlock or serialization failure, a busy SQLite file. The
    same call may well succeed once the other transaction is gone, so kiln's own loops
    keep what they were writing and try again later instead of treating it as bad."""

    def __init__(self, operation: str, message: str, *, contended: bool = False) -> None:
        self.operation = operation
        self.contended = contended
        super().__init__(f"{operation}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.operation, str(self).split(": ", 1)[-1],
                           self.contended))


class UnreachableError(StoreError):
    """The database cannot be reached."""


class NotMigratedError(StoreError):
    """The schema is missing or older than this version of kiln: run `kiln migrate`."""


class FencedError(KilnError):
    """``job.set_param`` was refused: the job no longer runs under ``server_id`` and
    ``attempt`` (it was rescued, cancelled, or claimed again), so nothing was written.
    A handler that catches it should stop: another execution owns the job now."""

    def __init__(self, job_id: int, attempt: int, server_id: str | None) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.server_id = server_id
        super().__init__(f"job {job_id} attempt {attempt} no longer runs on server "
                         f"{server_id}: the checkpoint was refused, nothing was written")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.attempt, self.server_id))


class CronError(KilnError, ValueError):
    """A malformed cron ``expression``; ``reason`` says what is wrong with it."""

    def __init__(self, expression: str, reason: str) -> None:
        self.expression = expression
        self.reason = reason
        super().__init__(f"malformed schedule {expression!r}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.expression, self.reason))


class ResultError(KilnError, ValueError):
    """A handler's return value cannot be stored; its attempt fails with this error
    (retried per the kind's policy) and no result is written."""

    def __init__(self, job_id: int, kind: str, reason: str) -> None:
        self.job_id = job_id
        self.kind = kind
        self.reason = reason
        super().__init__(f"the result of job {job_id} (kind {kind!r}) cannot be stored: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job_id, self.kind, self.reason))


class Shutdown(KilnError):
    """Raised into a job the server cancelled on shutdown; the job is handed back."""


def _rebuilt(kind: type[StoreError], operation: str, message: str,
             contended: bool) -> StoreError:
    """A StoreError (or a subclass) back from a pickle, ``contended`` included."""
    error = kind(operation, message)
    error.contended = contended
    return error
