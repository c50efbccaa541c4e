"""What ``Server.stats()`` returns: a typed snapshot of one server, built from memory.

Probes, the worker's ``/stats`` endpoint, the demo and kilnotel's gauges read it; it
never queries the database and never blocks. ``as_dict()`` is the JSON shape that
``GET /stats`` serves. ``server_stats`` and ``queue_stats`` gather it from the parts,
which keep their own counts."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kiln._events import EventHub
from kiln._server._completer import Completer
from kiln._server._health import Counters
from kiln._server._heartbeat import Heartbeater
from kiln._server._pool import Pool
from kiln._server._state import ServerState

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
    state: str  # new, running, stopping, stopped (kiln._server._state.ServerState)
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
    connections: int = 0  # database connections the process holds (Server.connections)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON values: the body of ``GET /stats`` (the queues without their
        ``oldest_started``, which kilnotel exports as an age)."""
        out = dataclasses.asdict(self)
        for queue in out["queues"].values():
            del queue["oldest_started"]
        return out


def queue_stats(pools: Mapping[str, Pool], configured: Mapping[str, int]) -> dict[str, QueueStats]:
    """Each queue's slots and running jobs; the ``configured`` concurrency until the
    server started its pools."""
    pools = dict(pools)  # a copy: the server adds its pools as it starts
    if not pools:
        return {q: QueueStats(concurrency=c) for q, c in configured.items()}
    out = {}
    for queue, pool in pools.items():
        started = [r.attempted_at for r in list(pool.running.values()) if r.attempted_at]
        out[queue] = QueueStats(
            concurrency=pool.concurrency, running=len(pool.running),
            stuck=len(pool.lingering), paused=pool.paused,
            oldest_started=min(started) if started else None,
        )
    return out


def server_stats(
    *,
    server_id: str,
    state: ServerState,
    leader: bool,
    queues: dict[str, QueueStats],
    counters: Counters,
    completer: Completer | None,
    heartbeat: Heartbeater | None,
    events: EventHub,
    notifications: bool,
    threads_stuck: int,
    rate_keys_undeclared: int,
    connections: int = 0,
) -> ServerStats:
    c, hb = completer, heartbeat
    return ServerStats(
        server_id=server_id,
        state=state.value,
        leader=leader,
        running=sum(q.running for q in queues.values()),
        concurrency=sum(q.concurrency for q in queues.values()),
        queues=queues,
        **counters.as_dict(),  # one keyword per counter, each a field
        results_pending=c.pending if c else 0,
        results_poisoned=c.poisoned if c else 0,
        results_dropped=c.dropped if c else 0,
        results_unapplied=c.unapplied if c else 0,
        results_failing_for=c.failing_for if c else 0.0,
        completer_crashes=c.crashes if c else 0,
        heartbeat_age=hb.age if hb else None,
        fenced_reason=hb.fenced if hb else None,
        notifications=notifications,
        event_errors=events.errors,
        events_dropped=events.dropped,
        handlers_stuck=sum(q.stuck for q in queues.values()),
        threads_stuck=threads_stuck,
        rate_keys_undeclared=rate_keys_undeclared,
        connections=connections,
    )
