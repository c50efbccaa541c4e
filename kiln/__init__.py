"""kiln: a durable job runner for Python that operators can see into."""

import typing as _typing

from kiln import events  # kiln.events.JobFinished after a plain ``import kiln``
from kiln._app import App, JobHandle, JobKind, kind
from kiln._client._bus import Bus, InProcessBus
from kiln._client._bus_redis import RedisBus
from kiln._client._cancelling import CancelResult
from kiln._client._client import Client
from kiln._client._filters import filter_of
from kiln._client._queues import QueueState
from kiln._errors import (
    ConfigError,
    CronError,
    FencedError,
    JobFinishedError,
    JobNotFoundError,
    KilnError,
    NotMigratedError,
    ResultError,
    Shutdown,
    StoreError,
    UnknownKindError,
    UnreachableError,
    ValidationError,
)
from kiln._model._concurrency import Concurrency
from kiln._model._controls import UnknownQueueError
from kiln._model._job import (
    AttemptError,
    AuditEntry,
    EnqueueResult,
    JobFilter,
    JobRow,
    JobState,
    NewJob,
    Outcome,
    PublishedKind,
    RateLimit,
    ServerInfo,
    StateCount,
)
from kiln._model._options import EnqueueOptions, JobOptions
from kiln._model._outcomes import Cancel, Fail, Snooze
from kiln._model._recurring import Recurring
from kiln._model._retry import Constant, Custom, Exponential, retry_window
from kiln._model._unique import Unique
from kiln._server import Health, Job, QueueStats, Server, ServerConfig, ServerStats
from kiln._version import VERSION
from kiln.stores import StoreOptions, TableSize

__version__ = VERSION

__all__ = [
    "App",
    "AttemptError",
    "AuditEntry",
    "Bus",
    "Cancel",
    "CancelResult",
    "Client",
    "Concurrency",
    "ConfigError",
    "Constant",
    "CronError",
    "Custom",
    "EnqueueOptions",
    "EnqueueResult",
    "Exponential",
    "Fail",
    "FencedError",
    "Health",
    "InProcessBus",
    "Job",
    "JobFilter",
    "JobFinishedError",
    "JobHandle",
    "JobKind",
    "JobNotFoundError",
    "JobOptions",
    "JobRow",
    "JobState",
    "KilnError",
    "NewJob",
    "NotMigratedError",
    "Outcome",
    "PublishedKind",
    "QueueState",
    "QueueStats",
    "RateLimit",
    "Recurring",
    "RedisBus",
    "ResultError",
    "Server",
    "ServerConfig",
    "ServerInfo",
    "ServerStats",
    "Shutdown",
    "Snooze",
    "StateCount",
    "StoreError",
    "StoreOptions",
    "TableSize",
    "Unique",
    "UnknownKindError",
    "UnknownQueueError",
    "UnreachableError",
    "VERSION",
    "ValidationError",
    "filter_of",
    "kind",
    "retry_window",
]


if not _typing.TYPE_CHECKING:  # to a type checker an unknown name (an old one too) stays an error

    def __getattr__(name: str) -> object:
        """The events moved to ``kiln.events``: their old names here still work for one
        release, each with a DeprecationWarning that names the new place."""
        if name in events.__all__:
            from kiln._model._deprecated import deprecated

            deprecated(f"kiln.{name}", f"kiln.events.{name}")
            return getattr(events, name)
        raise AttributeError(f"module 'kiln' has no attribute {name!r}")


def _claim_public_names() -> None:
    """Public classes and functions say ``kiln.X`` (help(), tracebacks, pickles), not the
    private module that defines them. Classes with annotated fields (the dataclasses,
    CancelResult) keep theirs: ``typing.get_type_hints`` resolves those (postponed)
    annotations in the class's module."""
    import dataclasses
    import inspect

    for name in __all__:
        obj = globals()[name]
        annotated = inspect.isclass(obj) and (
            dataclasses.is_dataclass(obj) or bool(vars(obj).get("__annotations__")))
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not annotated:
            obj.__module__ = __name__


_claim_public_names()
