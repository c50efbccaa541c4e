"""Health and counters: what a server reports to probes and dashboards.

``health_of`` gathers ``Server.healthy()`` from the parts, which keep their own state
(the heartbeat its age and fence, the completer its unwritten results);
``stuck_reasons`` says when handlers kiln gave up on block all progress; ``Counters``
counts the events ``stats()`` reports. From memory only: never the database.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from kiln._events import (
    ClaimQueried,
    Event,
    Fenced,
    Heartbeat,
    JobFinished,
    JobRescued,
    JobsAdmitted,
    StoreFailed,
)
from kiln._model._job import Outcome
from kiln._server._completer import Completer
from kiln._server._config import ServerConfig
from kiln._server._heartbeat import Heartbeater
from kiln._server._state import ServerState
from kiln.stores._translator import StoreFailure

# a failing operation not tried again for this long no longer counts (its loop stopped)
FAILURE_FORGOTTEN = 300.0


@dataclasses.dataclass(frozen=True, slots=True)
class Health:
    """``bool(health)`` is True when healthy; ``reasons`` says why not."""

    ok: bool
    reasons: tuple[str, ...] = ()
    fenced: bool = False
    heartbeat_stale: bool = False
    results_piling_up: bool = False
    handlers_stuck: bool = False  # stuck handlers hold every slot of a queue, or every thread
    results_stuck: bool = False  # results fail to be written, or their writer crashed
    store_failing: bool = False  # a store operation fails, again and again, past the bound

    def __bool__(self) -> bool:
        return self.ok

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def health_of(
    *,
    state: ServerState,
    config: ServerConfig,
    heartbeat: Heartbeater | None,
    completer: Completer | None,
    stuck: list[str],
    failures: Sequence[StoreFailure] = (),
    now: float | None = None,
) -> Health:
    """Healthy: running, not fenced, its heartbeat confirmed within two intervals, its
    results written, no queue blocked by ``stuck`` handlers (``stuck_reasons``), and no
    store operation failing (``failing_reasons``)."""
    reasons: list[str] = []
    fenced = bool(heartbeat and heartbeat.fenced)
    stale = bool(heartbeat and heartbeat.age > 2 * config.heartbeat_interval)
    piling = bool(completer and completer.over_limit)
    if state is not ServerState.RUNNING:
        reasons.append(f"server is {state.value}")
    if fenced and heartbeat:
        reasons.append(f"fenced: {heartbeat.fenced}")
    if stale and heartbeat:
        reasons.append(f"heartbeat stale: last confirmed {heartbeat.age:.1f}s ago")
    if piling and completer:
        reasons.append(f"results piling up: {completer.pending} unwritten")
    reasons.extend(stuck)
    unwritten = completer.health_problems() if completer else []
    reasons.extend(unwritten)
    failing = failing_reasons(failures, 2 * config.heartbeat_interval,
                              time.monotonic() if now is None else now)
    reasons.extend(failing)
    return Health(
        ok=not reasons, reasons=tuple(reasons), fenced=fenced, heartbeat_stale=stale,
        results_piling_up=piling, handlers_stuck=bool(stuck), results_stuck=bool(unwritten),
        store_failing=bool(failing),
    )


def failing_reasons(failures: Sequence[StoreFailure], bound: float, now: float) -> list[str]:
    """A store operation failing persistently: every call of it failed for longer than
    ``bound`` (two heartbeat intervals, the bound of a stale heartbeat), at least twice,
    and it was tried within FAILURE_FORGOTTEN. Whatever the cause (a pooler, a
    privilege, a table gone), the reason names the operation and its latest error."""
    return [
        f"store operation {f.operation} failing for {now - f.since:.1f}s"
        f" ({f.count} calls): {f.error}"
        for f in failures
        if f.count >= 2 and now - f.since > bound and now - f.at <= FAILURE_FORGOTTEN
    ]


def stuck_reasons(
    slots: Mapping[str, tuple[int, int]], threads_stuck: int, threads: int
) -> list[str]:
    """Why handlers kiln gave up on (still running past their timeout, shutdown or
    fence) leave this server unable to make progress: they hold every slot of a queue
    (``slots``: queue -> (concurrency, lingering)), or every thread for plain def
    handlers. Fewer of them only slow it down: stats() counts them."""
    reasons = [
        f"queue {queue}: all {concurrency} slots held by handlers still running after "
        "kiln gave up on their attempt (timeout, fence)"
        for queue, (concurrency, lingering) in slots.items()
        if lingering and lingering >= concurrency  # 0 slots (a queue control): none held
    ]
    if threads_stuck and threads_stuck >= threads:
        reasons.append(f"all {threads} threads for plain def handlers are held by handlers "
                       "still running after kiln gave up on their attempt")
    return reasons


class Counters:
    """Counts events for ``Server.stats()``; an inline event subscriber.

    It takes only the event types it counts (``event_types``), and counts claims per
    claim query rather than per job, so a server without other subscribers builds no
    per-job event but JobFinished.
    """

    def __init__(self) -> None:
        self.claimed = 0
        self.completed = 0
        self.retried = 0
        self.failed = 0
        self.snoozed = 0
        self.cancelled = 0
        self.handed_back = 0
        self.rescued = 0
        self.admitted = 0
        self.heartbeats_ok = 0
        self.heartbeats_failed = 0
        self.fenced = 0
        self.store_errors = 0

    _OUTCOME_FIELD = {
        Outcome.COMPLETED: "completed",
        Outcome.RETRY: "retried",
        Outcome.FAILED: "failed",
        Outcome.SNOOZED: "snoozed",
        Outcome.CANCELLED: "cancelled",
        Outcome.HANDED_BACK: "handed_back",
    }

    def __call__(self, event: Event) -> None:
        count = self._dispatch.get(type(event))
        if count is not None:
            count(self, event)

    def _finished(self, event: JobFinished) -> None:
        name = self._OUTCOME_FIELD[event.outcome]
        setattr(self, name, getattr(self, name) + 1)

    def _claimed(self, event: ClaimQueried) -> None:
        self.claimed += event.claimed

    def _rescued(self, event: JobRescued) -> None:
        self.rescued += 1

    def _admitted(self, event: JobsAdmitted) -> None:
        self.admitted += len(event.delays)

    def _heartbeat(self, event: Heartbeat) -> None:
        if event.ok:
            self.heartbeats_ok += 1
        else:
            self.heartbeats_failed += 1

    def _fenced(self, event: Fenced) -> None:
        self.fenced += 1

    def _store_failed(self, event: StoreFailed) -> None:
        self.store_errors += 1

    _dispatch: ClassVar[dict[type[Event], Callable[[Counters, Any], None]]] = {
        JobFinished: _finished,
        ClaimQueried: _claimed,
        JobRescued: _rescued,
        JobsAdmitted: _admitted,
        Heartbeat: _heartbeat,
        Fenced: _fenced,
        StoreFailed: _store_failed,
    }

    event_types: ClassVar[frozenset[type[Event]]] = frozenset(_dispatch)

    def as_dict(self) -> dict[str, Any]:
        """The counters by name; each one is a field of ``ServerStats``."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}
