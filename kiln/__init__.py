"""kiln: a durable job runner for Python that operators can see into."""

from kiln._app import App
from kiln._bus import Bus, InProcessBus
from kiln._bus_redis import RedisBus
from kiln._cancelling import CancelResult
from kiln._client import Client, filter_of
from kiln._concurrency import Concurrency
from kiln._config import ServerConfig
from kiln._controls import UnknownQueueError
from kiln._cron import Recurring
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
from kiln._events import (
    ClaimQueried,
    CompleterCrashed,
    Event,
    EventHub,
    Fenced,
    HandlerStuck,
    Heartbeat,
    JobCancelled,
    JobClaimed,
    JobFinished,
    JobReconciled,
    JobRescued,
    JobsAdmitted,
    JobsEnqueued,
    JobsReleased,
    JobStarted,
    LeaderChanged,
    MaintenanceRan,
    NotifierChanged,
    ResultDropped,
    ResultPoisoned,
    ResultsUnapplied,
    StoreFailed,
)
from kiln._handle import Job
from kiln._job import (
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
from kiln._options import EnqueueOptions, JobOptions
from kiln._outcomes import Cancel, Snooze
from kiln._queues import QueueState
from kiln._retry import Constant, Custom, Exponential, retry_window
from kiln._server import Health, QueueStats, Server, ServerStats
from kiln._unique import Unique
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
    "ClaimQueried",
    "Client",
    "CompleterCrashed",
    "Concurrency",
    "ConfigError",
    "Constant",
    "CronError",
    "Custom",
    "EnqueueOptions",
    "EnqueueResult",
    "Event",
    "EventHub",
    "Exponential",
    "Fenced",
    "FencedError",
    "HandlerStuck",
    "Health",
    "Heartbeat",
    "InProcessBus",
    "Job",
    "JobCancelled",
    "JobClaimed",
    "JobFilter",
    "JobFinished",
    "JobFinishedError",
    "JobNotFoundError",
    "JobOptions",
    "JobReconciled",
    "JobRescued",
    "JobRow",
    "JobStarted",
    "JobState",
    "JobsAdmitted",
    "JobsEnqueued",
    "JobsReleased",
    "KilnError",
    "LeaderChanged",
    "MaintenanceRan",
    "NewJob",
    "NotMigratedError",
    "NotifierChanged",
    "Outcome",
    "PublishedKind",
    "QueueState",
    "QueueStats",
    "RateLimit",
    "Recurring",
    "RedisBus",
    "ResultDropped",
    "ResultError",
    "ResultPoisoned",
    "ResultsUnapplied",
    "Server",
    "ServerConfig",
    "ServerInfo",
    "ServerStats",
    "Shutdown",
    "Snooze",
    "StateCount",
    "StoreError",
    "StoreFailed",
    "StoreOptions",
    "TableSize",
    "Unique",
    "UnknownKindError",
    "UnknownQueueError",
    "UnreachableError",
    "VERSION",
    "ValidationError",
    "filter_of",
    "retry_window",
]


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
