"""Explicit outcomes a handler may return instead of completing normally.

They are values, not errors: ``return kiln.Snooze(30)`` runs the job again in 30
seconds without using an attempt; ``return kiln.Cancel("reason")`` ends it for good
in the cancelled state. Raising any exception fails the attempt (retry or failed);
``kiln.Fail``, raised or returned, fails the job for good at once.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta

from kiln._errors import ConfigError
from kiln._model._sanitise import MAX_DELAY


@dataclasses.dataclass(frozen=True, slots=True)
class Snooze:
    """Run the job again after ``seconds`` (a number or a ``timedelta``), at most ten
    years: a wait the store must be able to write (an infinite one is refused here
    rather than when its result is written)."""

    seconds: float

    def __post_init__(self) -> None:
        value = self.seconds
        if isinstance(value, timedelta):
            value = value.total_seconds()
            object.__setattr__(self, "seconds", value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError("seconds", value, "a snooze is a number of seconds or a timedelta")
        if not math.isfinite(value) or value < 0:
            raise ConfigError("seconds", value, "a snooze must be a finite, non-negative wait")
        if value > MAX_DELAY:
            raise ConfigError(
                "seconds", value, f"a snooze must not exceed {MAX_DELAY:.0f}s (ten years)"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel:
    """Return it from a handler to end the job ``cancelled`` for good, with
    ``reason``; no attempt is retried."""

    reason: str = "cancelled by its handler"


class Fail(Exception):  # an outcome, named as Snooze and Cancel are
    """Raise it (or return it) from a handler to fail the job for good at once, with
    ``reason``, whatever attempts remain: a 550 bounce, a request that can never succeed.
    The job ends ``failed``, counted and alerted as any failure, and its dependents are
    treated as for any failure; ``kiln.Cancel`` ends it ``cancelled`` instead."""

    def __init__(self, reason: str = "failed by its handler") -> None:
        super().__init__(reason)
        self.reason = reason
