"""Explicit outcomes a handler may return instead of completing normally.

They are values, not errors: ``return kiln.Snooze(30)`` runs the job again in 30
seconds without using an attempt; ``return kiln.Cancel("reason")`` ends it for good
in the cancelled state. Raising any exception fails the attempt (retry or failed).
"""

from __future__ import annotations

import dataclasses

from kiln._errors import ConfigError


@dataclasses.dataclass(frozen=True, slots=True)
class Snooze:
    seconds: float

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ConfigError("seconds", self.seconds, "a snooze must not be negative")


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel:
    reason: str = "cancelled by its handler"
