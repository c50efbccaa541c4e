"""Backoff policies: how long a failed attempt waits before the next one.

A policy maps the number of the attempt that just failed (1-based) to a wait in
seconds. Policies that kiln knows can be stored with a job as a JSON spec.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from kiln._errors import ConfigError


class Backoff(Protocol):
    def wait(self, attempt: int) -> float:
        """Seconds to wait after ``attempt`` failed."""

    def bounds(self, attempt: int) -> tuple[float, float]:
        """The shortest and longest wait after ``attempt`` failed."""


def _wait(field: str, value: Any) -> float:
    """A wait given as seconds (int or float) or a timedelta, as a finite float."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, value, f"{field} must be a number of seconds or a timedelta")
    if not math.isfinite(value):
        raise ConfigError(field, value, f"{field} must be a finite number of seconds")
    return float(value)


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Exponential:
    """Each wait is drawn between half and all of min(max, base * 2**(attempt-1)).

    ``base`` and ``max`` are seconds or timedeltas: ``Exponential(timedelta(seconds=2),
    timedelta(minutes=2))`` is ``Exponential(2, 120)``."""

    base: float
    max: float

    def __init__(self, base: float | timedelta = 1.0, max: float | timedelta = 3600.0) -> None:
        low, high = _wait("base", base), _wait("max", max)
        if low <= 0:
            raise ConfigError("base", base, "base must be a positive number of seconds")
        if high < low:
            raise ConfigError("max", max, "max must be at least base")
        object.__setattr__(self, "base", low)
        object.__setattr__(self, "max", high)

    def _full(self, attempt: int) -> float:
        exponent = min(max(attempt - 1, 0), 62)
        return float(min(self.max, self.base * (2**exponent)))

    def bounds(self, attempt: int) -> tuple[float, float]:
        full = self._full(attempt)
        return full / 2, full

    def wait(self, attempt: int) -> float:
        low, high = self.bounds(attempt)
        return random.uniform(low, high)

    def to_json(self) -> dict[str, Any]:
        return {"type": "exponential", "base": self.base, "max": self.max}


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Constant:
    """The same wait after every failed attempt (seconds or a timedelta)."""

    seconds: float

    def __init__(self, seconds: float | timedelta) -> None:
        value = _wait("seconds", seconds)
        if value < 0:
            raise ConfigError("seconds", seconds, "a wait must not be negative")
        object.__setattr__(self, "seconds", value)

    def bounds(self, attempt: int) -> tuple[float, float]:
        return self.seconds, self.seconds

    def wait(self, attempt: int) -> float:
        return self.seconds

    def to_json(self) -> dict[str, Any]:
        return {"type": "constant", "seconds": self.seconds}


@dataclasses.dataclass(frozen=True, slots=True)
class Custom:
    """A user-supplied function of the failed attempt's number."""

    fn: Callable[[int], float]

    def bounds(self, attempt: int) -> tuple[float, float]:
        value = float(self.fn(attempt))
        return value, value

    def wait(self, attempt: int) -> float:
        return max(0.0, float(self.fn(attempt)))


DEFAULT_BACKOFF = Exponential(1.0, 3600.0)


def as_backoff(value: Backoff | Callable[[int], float] | None) -> Backoff | None:
    """Accept a policy or a plain callable of the attempt number."""
    if value is None or isinstance(value, Exponential | Constant | Custom):
        return value
    if hasattr(value, "wait") and hasattr(value, "bounds"):
        return value
    if callable(value):
        return Custom(value)
    raise ConfigError("backoff", value, "a backoff must be a policy or a callable(attempt)")


def backoff_to_json(policy: Backoff | None) -> dict[str, Any] | None:
    to_json = getattr(policy, "to_json", None)
    if policy is None:
        return None
    if to_json is None:
        raise ConfigError(
            "backoff", policy, "only Exponential and Constant can be stored with a job"
        )
    result: dict[str, Any] = to_json()
    return result


def backoff_from_json(spec: Any) -> Backoff | None:
    if not isinstance(spec, dict):
        return None
    if spec.get("type") == "exponential":
        return Exponential(float(spec["base"]), float(spec["max"]))
    if spec.get("type") == "constant":
        return Constant(float(spec["seconds"]))
    return None


def retry_window(policy: Backoff, max_attempts: int) -> tuple[float, float]:
    """Shortest and longest total wait between the first and the last attempt.

    There are ``max_attempts - 1`` waits: one after each failed attempt but the last.
    """
    if max_attempts < 1:
        raise ConfigError("max_attempts", max_attempts, "max_attempts must be at least 1")
    low = high = 0.0
    for attempt in range(1, max_attempts):
        lo, hi = policy.bounds(attempt)
        low += lo
        high += hi
    return low, high
