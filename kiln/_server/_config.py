"""ServerConfig: every knob of a server, its default, and the rules between them."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypedDict, Unpack

from kiln._errors import ConfigError
from kiln._model import _validate
from kiln._model._job import DEAD_AFTER
from kiln._model._results import check_max_result_bytes

Duration = float | int | timedelta


def seconds(value: Duration, field: str = "duration") -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, value, "must be a number of seconds or a timedelta")
    return float(value)


def check_queues(queues: Mapping[str, int]) -> dict[str, int]:
    """A server's queues and their concurrency: at least one, each valid."""
    if not queues:
        raise ConfigError("queues", dict(queues), "a server needs at least one queue")
    for name, concurrency in queues.items():
        _validate.check_name("queue", name)
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"queues[{name!r}]", concurrency, "concurrency must be >= 1")
    return dict(queues)


# every knob and its default, read from ServerConfig.__init__ below (stated once, there)
DEFAULTS: dict[str, Any] = {}
_DURATIONS = (
    "poll_interval", "heartbeat_interval", "dead_after", "leader_ttl", "shutdown_timeout",
    "kill_grace", "timeout", "release_interval", "results_flush_interval", "prune_interval",
    "sweep_after",
)
_OPTIONAL = ("prune_completed_after", "prune_cancelled_after", "prune_failed_after")
_COUNTS = ("results_batch", "results_max_pending", "prune_batch", "admit_batch", "rescue_batch")


@dataclasses.dataclass(frozen=True, init=False)
class ServerConfig:
    """Durations are given as seconds (int or float) or ``timedelta``; stored as float seconds.

    Rule from the operator's guide: dead_after > 3*heartbeat_interval + kill_grace + 5s,
    so a server that loses the database fences itself before anyone rescues its jobs.
    """

    poll_interval: float  # how often an idle pool looks for work without a notification
    heartbeat_interval: float  # how often a server reports that it is alive
    dead_after: float  # silence after which a server's running jobs are rescued
    leader_ttl: float  # lease of the leader (recurring jobs, rescue, sweep, pruning)
    shutdown_timeout: float  # how long run() waits for running jobs on shutdown
    kill_grace: float  # extra wait after cancelling jobs that ignored the shutdown
    timeout: float  # default per-job timeout
    release_interval: float  # delayed-job check when no notifications arrive
    sync_threads: int  # threads for plain def handlers; 0: the sum of the pools' concurrency
    results_batch: int  # results written per round trip
    results_max_pending: int  # unwritten results beyond which claiming pauses
    results_flush_interval: float  # how long results gather before a write
    prune_completed_after: float | None
    prune_cancelled_after: float | None
    prune_failed_after: float | None  # None: failed jobs stay until requeued or deleted
    prune_interval: float
    prune_batch: int
    sweep_after: float  # records of servers dead this long are removed
    admit_batch: int
    rescue_batch: int
    max_result_bytes: int  # largest stored result (JSON bytes) of a kind that sets none

    def __init__(
        self,
        *,
        poll_interval: Duration = 1.0,
        heartbeat_interval: Duration = 5.0,
        dead_after: Duration = DEAD_AFTER,
        leader_ttl: Duration = 15.0,
        shutdown_timeout: Duration = 30.0,
        kill_grace: Duration = 5.0,
        timeout: Duration = 1800.0,
        release_interval: Duration = 0.1,
        sync_threads: int = 0,
        results_batch: int = 500,
        results_max_pending: int = 10_000,
        results_flush_interval: Duration = 0.005,
        prune_completed_after: Duration | None = 24 * 3600.0,
        prune_cancelled_after: Duration | None = 7 * 24 * 3600.0,
        prune_failed_after: Duration | None = None,
        prune_interval: Duration = 60.0,
        prune_batch: int = 1000,
        sweep_after: Duration = 24 * 3600.0,
        admit_batch: int = 1000,
        rescue_batch: int = 500,
        max_result_bytes: int = 64 * 1024,
    ) -> None:
        given = dict(locals())
        for name in DEFAULTS:
            object.__setattr__(self, name, given[name])
        self.__post_init__()

    def __post_init__(self) -> None:
        for name in _DURATIONS:
            self._positive(name, getattr(self, name))
        for name in _OPTIONAL:
            if getattr(self, name) is not None:
                self._positive(name, getattr(self, name))
        for name in _COUNTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be a whole number of at least 1")
        if isinstance(self.sync_threads, bool) or not isinstance(self.sync_threads, int) \
                or self.sync_threads < 0:
            raise ConfigError("sync_threads", self.sync_threads, "must be 0 (auto) or more")
        check_max_result_bytes(self.max_result_bytes)
        floor = 3 * self.heartbeat_interval + self.kill_grace + 5.0
        if self.dead_after <= floor:
            raise ConfigError(
                "dead_after", self.dead_after,
                "must stay above 3*heartbeat_interval + kill_grace + 5s "
                f"= {floor:g}s, or a server cut off from the database could still be "
                "running jobs that another server rescues",
            )
        if self.leader_ttl <= self.heartbeat_interval:
            raise ConfigError(
                "leader_ttl", self.leader_ttl, "must be longer than heartbeat_interval"
            )

    def _positive(self, name: str, value: Any) -> None:
        secs = seconds(value, name)
        if not math.isfinite(secs) or secs <= 0:
            raise ConfigError(name, value, "must be a positive duration")
        object.__setattr__(self, name, secs)

    @property
    def fence_after(self) -> float:
        """Silence after which a server fences itself: 3 heartbeats without confirmation."""
        return 3 * float(self.heartbeat_interval)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in DEFAULTS}

    def replace(self, **changes: Unpack[ServerConfigChanges]) -> ServerConfig:
        """A copy with ``changes`` applied, validated as a new config is."""
        return ServerConfig(**{**self.as_dict(), **changes})


class ServerConfigChanges(TypedDict, total=False):
    """The keyword arguments of ``ServerConfig.replace``: every field, each optional
    (tests/test_options.py checks that the keys are ServerConfig's fields)."""

    poll_interval: Duration
    heartbeat_interval: Duration
    dead_after: Duration
    leader_ttl: Duration
    shutdown_timeout: Duration
    kill_grace: Duration
    timeout: Duration
    release_interval: Duration
    sync_threads: int
    results_batch: int
    results_max_pending: int
    results_flush_interval: Duration
    prune_completed_after: Duration | None
    prune_cancelled_after: Duration | None
    prune_failed_after: Duration | None
    prune_interval: Duration
    prune_batch: int
    sweep_after: Duration
    admit_batch: int
    rescue_batch: int
    max_result_bytes: int


DEFAULTS.update((name, p.default) for name, p in
                inspect.signature(ServerConfig.__init__).parameters.items() if name != "self")
