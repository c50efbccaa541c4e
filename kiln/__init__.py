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
from kiln._handle import FencedError, Job
from kiln._health import Health
from kiln._job import (
    AttemptError,
    EnqueueResult,
    JobFilter,
    JobRow,
    JobState,
    NewJob,
    Outcome,
    RateLimit,
)
from kiln._outcomes import Cancel, Snooze
from kiln._queues import QueueState
from kiln._retry import Constant, Custom, Exponential, retry_window
from kiln._server import Server
from kiln._unique import Unique
from kiln._version import VERSION

__version__ = VERSION

__all__ = [
    "App",
    "AttemptError",
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
    "QueueState",
    "RateLimit",
    "Recurring",
    "RedisBus",
    "ResultDropped",
    "ResultError",
    "ResultPoisoned",
    "ResultsUnapplied",
    "Server",
    "ServerConfig",
    "Shutdown",
    "Snooze",
    "StoreError",
    "StoreFailed",
    "Unique",
    "UnknownKindError",
    "UnknownQueueError",
    "UnreachableError",
    "VERSION",
    "ValidationError",
    "filter_of",
    "retry_window",
]
