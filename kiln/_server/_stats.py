"""What ``Server.stats()`` returns: a typed snapshot of one server, built from memory.

Probes, the worker's ``/stats`` endpoint, the demo and kilnotel's gauges read it; it
never queries the database and never blocks. ``as_dict()`` is the JSON shape that
``GET /stats`` serves."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["QueueStats", "ServerStats"]


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue this server serves. Before the server starts, ``concurrency`` is the
    configured one and nothing runs."""

    concurrency: int
    running: int = 0
    stuck: int = 0  # handlers given up on that still run, holding their slots
    paused: bool = False
    oldest_started: datetime | None = None  # when its longest-running attempt started


@dataclass(frozen=True, slots=True)
class ServerStats:
    """One server's counters since it started, and its state now.

    The counters count events of this process only (``claimed`` counts jobs claimed,
    ``completed`` ... ``handed_back`` count finished attempts by outcome)."""

    server_id: str
    state: str  # new, starting, running, stopping, stopped
    leader: bool
    running: int
    concurrency: int
    queues: dict[str, QueueStats] = field(default_factory=dict)
    claimed: int = 0
    completed: int = 0
    retried: int = 0
    failed: int = 0
    snoozed: int = 0
    cancelled: int = 0
    handed_back: int = 0
    rescued: int = 0
    admitted: int = 0
    heartbeats_ok: int = 0
    heartbeats_failed: int = 0
    fenced: int = 0
    store_errors: int = 0
    results_pending: int = 0
    results_poisoned: int = 0
    results_dropped: int = 0
    results_unapplied: int = 0
    results_failing_for: float = 0.0
    completer_crashes: int = 0
    heartbeat_age: float | None = None
    fenced_reason: str | None = None
    notifications: bool = False
    event_errors: int = 0
    events_dropped: int = 0
    handlers_stuck: int = 0
    threads_stuck: int = 0
    rate_keys_undeclared: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values: the body of ``GET /stats`` (the queues without their
        ``oldest_started``, which kilnotel exports as an age)."""
        out = dataclasses.asdict(self)
        for queue in out["queues"].values():
            del queue["oldest_started"]
        return out
