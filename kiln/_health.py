"""Health and stats: what a server reports to probes and dashboards."""

from __future__ import annotations

import dataclasses
from typing import Any

from kiln._events import (
    Event,
    Fenced,
    Heartbeat,
    JobClaimed,
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

    def __bool__(self) -> bool:
        return self.ok

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Counters:
    """Counts events for ``Server.stats()``; an inline event subscriber."""

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
        if isinstance(event, JobFinished):
            name = self._OUTCOME_FIELD[event.outcome]
            setattr(self, name, getattr(self, name) + 1)
        elif isinstance(event, JobClaimed):
            self.claimed += 1
        elif isinstance(event, JobRescued):
            self.rescued += 1
        elif isinstance(event, JobsAdmitted):
            self.admitted += len(event.delays)
        elif isinstance(event, Heartbeat):
            if event.ok:
                self.heartbeats_ok += 1
            else:
                self.heartbeats_failed += 1
        elif isinstance(event, Fenced):
            self.fenced += 1
        elif isinstance(event, StoreFailed):
            self.store_errors += 1

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))
