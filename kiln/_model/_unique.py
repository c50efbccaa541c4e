"""Unique jobs: ``kiln.Unique`` and the key it gives a job.

The key is computed here, at enqueue, from the kind and what ``by`` names (or the
``key`` given), as canonical JSON (every dict's keys sorted, so equal args give one key
whatever order a producer built them in), hashed; a ``period`` is bucketed by the store
with its own clock. The stores enforce uniqueness with a unique index over the key of
the jobs whose state counts (migration 0004): never a lock or a read before the
insert. Owns validation and the key; no I/O.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from json.encoder import encode_basestring
from typing import Any, ClassVar

from kiln._errors import ConfigError, ValidationError
from kiln._model._job import JSON, UNIQUE_BITS, JobState
from kiln._model._json import canonical, encode

# a unique job counts while it is in any of these: moving between them never needs a
# second look at the index, so no state change of a running system can collide
ACTIVE: tuple[JobState, ...] = (
    JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
    JobState.RUNNING,
)
OPTIONAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})
# the active states but running: "at most one waiting" (and, with Concurrency(max=1),
# one running). A job of such a key gives its key up for good as it starts (the claim
# sets its states to none, kiln.stores._rows.RAN_UNIQUE): its retry is not deduplicated
WAITING: tuple[JobState, ...] = tuple(s for s in ACTIVE if s is not JobState.RUNNING)


@dataclasses.dataclass(frozen=True, slots=True)
class Unique:
    """At most one job of a kind per key among the jobs in ``states``.

    ``by``: what makes the key, besides the kind: ``"args"`` (all of them),
    ``"args.NAME"`` (one top-level argument; a job without it is refused), ``"queue"``.
    ``key``: a key of your own instead of ``by``. ``states``: the states that count;
    always the active ones, plus any of completed, failed, cancelled (default: none of
    them, so a finished job can be enqueued again); or ``Unique.WAITING``, the active
    ones but running (a job enqueued while one runs is kept: with ``Concurrency(max=1)``
    at most one waiting and one running per key). ``period``: seconds (or a
    timedelta): one job per key per period, bucketed by the database clock.
    """

    by: tuple[str, ...] = ("args",)
    key: str | None = None
    states: tuple[JobState, ...] = ACTIVE
    period: float | timedelta | None = None  # a timedelta becomes seconds
    WAITING: ClassVar[tuple[JobState, ...]] = WAITING

    def __post_init__(self) -> None:
        by = (self.by,) if isinstance(self.by, str) else tuple(self.by)
        object.__setattr__(self, "by", by)
        for part in by:
            if part not in ("args", "queue") and not (part.startswith("args.") and part[5:]):
                raise ConfigError("unique.by", part, 'use "args", "args.NAME" or "queue"')
        if self.key is not None and (not isinstance(self.key, str) or not self.key):
            raise ConfigError("unique.key", self.key, "must be a non-empty string")
        object.__setattr__(self, "states", _states(self.states))
        object.__setattr__(self, "period", _period(self.period))

    @property
    def period_seconds(self) -> float | None:
        """``period`` in seconds (a timedelta given is converted at construction)."""
        period = self.period
        return period.total_seconds() if isinstance(period, timedelta) else period

    @property
    def mask(self) -> int:
        return sum(UNIQUE_BITS[s] for s in self.states)

    def key_of(self, kind: str, queue: str, args: Any) -> str:
        """The job's key (without the period's bucket); ValidationError if ``by`` names
        an argument the job does not have."""
        parts: list[JSON] = [kind, self.period_seconds]
        if self.key is not None:
            parts.append(["key", self.key])
        else:
            parts.extend(_part(p, queue, args) for p in self.by)
        return hashlib.sha256(canonical(parts).encode()).hexdigest()[:40]

    def keyer(self, kind: str, queue: str) -> Callable[[Any], str]:
        """``key_of`` for many jobs of one kind and queue (enqueue_many): the text they
        share is encoded once, each job's parts then; the same keys key_of gives."""
        if self.key is not None:
            fixed = self.key_of(kind, queue, None)
            return lambda args: fixed
        head = encode([kind, self.period_seconds])[:-1] + ","
        if len(self.by) == 1 and self.by[0].startswith("args."):
            return _one_arg_keyer(self, kind, queue, head)
        parts = [_part_text(part, queue) for part in self.by]

        def key(args: Any) -> str:
            try:
                text = head + ",".join([part(args) for part in parts]) + "]"
            except (TypeError, ValueError, RecursionError):
                return self.key_of(kind, queue, args)  # its slower path, or its error
            return hashlib.sha256(text.encode()).hexdigest()[:40]

        return key

    def to_json(self) -> dict[str, JSON]:
        return {"by": list(self.by), "key": self.key, "states": [s.value for s in self.states],
                "period": self.period_seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Unique:
        return cls(by=tuple(data.get("by") or ("args",)), key=data.get("key"),
                   states=tuple(JobState(s) for s in data.get("states") or ACTIVE),
                   period=data.get("period"))


def _part(part: str, queue: str, args: Any) -> JSON:
    if part == "args":
        return ["args", args]
    if part == "queue":
        return ["queue", queue]
    name = part[5:]
    if not isinstance(args, dict) or name not in args:
        raise ValidationError(
            f"unique by {part}: the job's args have no top-level key {name!r}"
        )
    return [part, args[name]]


def _one_arg_keyer(unique: Unique, kind: str, queue: str, head: str) -> Callable[[Any], str]:
    """``keyer`` of the common ``by=("args.NAME",)``: one concatenation and one hash a
    job; a str value is encoded by the function the JSON encoder itself calls for it."""
    part = unique.by[0]
    name = part[5:]
    prefix = head + encode([part])[:-1] + ","
    sha256 = hashlib.sha256

    def key(args: Any) -> str:
        if args.__class__ is not dict or name not in args:
            return unique.key_of(kind, queue, args)  # its ValidationError naming the key
        value = args[name]
        try:
            text = encode_basestring(value) if value.__class__ is str else canonical(value)
        except (TypeError, ValueError, RecursionError):
            return unique.key_of(kind, queue, args)  # its slower path, or its error
        return sha256((prefix + text + "]]").encode()).hexdigest()[:40]

    return key


def _part_text(part: str, queue: str) -> Callable[[Any], str]:
    """A function of a job's args giving the text ``_part`` encodes to."""
    if part == "queue":
        fixed = encode(["queue", queue])
        return lambda args: fixed
    start = encode([part])[:-1] + ","
    if part == "args":
        return lambda args: start + canonical(args) + "]"
    name = part[5:]

    def text(args: Any) -> str:
        if not isinstance(args, dict) or name not in args:
            _part(part, queue, args)  # raises the ValidationError naming the key
        return start + canonical(args[name]) + "]"

    return text


def _states(states: Iterable[JobState | str]) -> tuple[JobState, ...]:
    try:
        chosen = {JobState(s) for s in states}
    except ValueError as exc:
        raise ConfigError("unique.states", list(states), "unknown state") from exc
    if JobState.RUNNING not in chosen and set(WAITING) <= chosen:
        if chosen & OPTIONAL:
            raise ConfigError(
                "unique.states", sorted(s.value for s in chosen),
                "states without running cannot hold finished ones (a job that ran gives its"
                " key up as it starts)",
            )
        return WAITING
    missing = [s.value for s in ACTIVE if s not in chosen]
    if missing:
        raise ConfigError(
            "unique.states", sorted(s.value for s in chosen),
            f"must include every active state (missing {', '.join(missing)}; running may"
            " be left out: Unique.WAITING); add any of completed, failed, cancelled to keep"
            " finished jobs unique too",
        )
    return tuple(s for s in JobState if s in chosen)


def _period(period: float | timedelta | None) -> float | None:
    if period is None:
        return None
    seconds = period.total_seconds() if isinstance(period, timedelta) else period
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) \
            or not math.isfinite(seconds) or seconds < 1:
        raise ConfigError("unique.period", period, "must be at least one second, or None")
    return float(seconds)
