"""Health and stats: what a server reports to probes and dashboards."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
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
from kiln._job import Outcome


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

    def __bool__(self) -> bool:
        return self.ok

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
