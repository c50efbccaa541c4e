"""ServerConfig: every knob of a server, its default, and the rules between them."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any

from kiln._errors import ConfigError

Duration = float | int | timedelta


def seconds(value: Duration, field: str = "duration") -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, value, "must be a number of seconds or a timedelta")
    return float(value)


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Durations are seconds (float) or ``timedelta``; stored as float seconds.

    Rule from the operator's guide: dead_after > 3*heartbeat_interval + kill_grace + 5s,
    so a server that loses the database fences itself before anyone rescues its jobs.
    """

    poll_interval: Duration = 1.0
    heartbeat_interval: Duration = 5.0
    dead_after: Duration = 60.0
    leader_ttl: Duration = 15.0
    shutdown_timeout: Duration = 30.0
    kill_grace: Duration = 5.0
    timeout: Duration = 1800.0
    release_interval: Duration = 0.1  # delayed-job check when no notifications arrive
    sync_threads: int = 0  # 0: the sum of the pools' concurrency
    results_batch: int = 500  # results written per round trip
    results_max_pending: int = 10_000  # unwritten results beyond which claiming slows
    results_flush_interval: Duration = 0.005
    prune_completed_after: Duration | None = 24 * 3600.0
    prune_cancelled_after: Duration | None = 7 * 24 * 3600.0
    prune_failed_after: Duration | None = None  # kept until requeued or deleted
    prune_interval: Duration = 60.0
    prune_batch: int = 1000
    sweep_after: Duration = 24 * 3600.0  # dead servers' records are removed after this
    admit_batch: int = 1000
    rescue_batch: int = 500

    _DURATIONS = (
        "poll_interval", "heartbeat_interval", "dead_after", "leader_ttl", "shutdown_timeout",
        "kill_grace", "timeout", "release_interval", "results_flush_interval", "prune_interval",
        "sweep_after",
    )
    _OPTIONAL = ("prune_completed_after", "prune_cancelled_after", "prune_failed_after")

    def __post_init__(self) -> None:
        for name in self._DURATIONS:
            self._positive(name, getattr(self, name))
        for name in self._OPTIONAL:
            if getattr(self, name) is not None:
                self._positive(name, getattr(self, name))
        for name in ("results_batch", "results_max_pending", "prune_batch", "admit_batch",
                     "rescue_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, value, "must be a whole number of at least 1")
        if not isinstance(self.sync_threads, int) or self.sync_threads < 0:
            raise ConfigError("sync_threads", self.sync_threads, "must be 0 (auto) or more")
        floor = 3 * self.heartbeat_interval + self.kill_grace + 5.0  # type: ignore[operator]
        if self.dead_after <= floor:  # type: ignore[operator]
            raise ConfigError(
                "dead_after", self.dead_after,
                "must stay above 3*heartbeat_interval + kill_grace + 5s "
                f"= {floor:g}s, or a server cut off from the database could still be "
                "running jobs that another server rescues",
            )
        if self.leader_ttl <= self.heartbeat_interval:  # type: ignore[operator]
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
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
