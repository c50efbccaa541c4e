"""Recurring jobs: a schedule (cron expression or interval) and the job it enqueues."""

from __future__ import annotations

import dataclasses
import math
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kiln._errors import CronError
from kiln._model._build import build_job

SHORTCUTS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclasses.dataclass(frozen=True)
class Recurring:
    """Enqueue ``kind`` with ``args`` on every slot of the schedule."""

    name: str
    kind: str
    args: Any
    cron: str | None = None
    every: float | timedelta | None = None  # seconds (a timedelta becomes seconds)
    timezone: str = "UTC"
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every mistake is an error here, at declaration, not at the first slot."""
        what = self.cron if self.cron is not None else f"every {self.every!r}"
        if (self.cron is None) == (self.every is None):
            raise CronError(str(what), "give exactly one of cron or every")
        if isinstance(self.every, timedelta):
            object.__setattr__(self, "every", self.every.total_seconds())
        if self.every is not None and (
            isinstance(self.every, bool) or not isinstance(self.every, int | float)
            or not math.isfinite(self.every) or self.every <= 0
        ):
            raise CronError(str(what), "an interval must be a positive number of seconds")
        if not isinstance(self.timezone, str):
            raise CronError(str(what), f"the time zone must be a name, got {self.timezone!r}")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise CronError(str(what), f"unknown time zone {self.timezone!r}") from exc
        if self.cron is not None:
            validate_cron(self.cron)
        build_job(self.kind, self.args, None, **self.options)  # ValidationError on bad options

    @property
    def every_seconds(self) -> float | None:
        """``every`` in seconds (a timedelta given is converted at construction)."""
        every = self.every
        return every.total_seconds() if isinstance(every, timedelta) else every

    def slot_at_or_before(self, now: datetime) -> datetime:
        """The latest slot not after ``now`` (UTC-aware)."""
        every = self.every_seconds
        if every is not None:
            epoch = now.timestamp()
            return datetime.fromtimestamp(epoch - epoch % every, now.tzinfo)
        from croniter import croniter

        local = now.astimezone(ZoneInfo(self.timezone))
        # croniter's get_prev from just after now: now itself counts when it is a slot
        it = croniter(expand(self.cron or ""), local + timedelta(microseconds=1))
        prev: datetime = it.get_prev(datetime)
        return prev.astimezone(now.tzinfo)

    def next_slot_after(self, when: datetime) -> datetime:
        every = self.every_seconds
        if every is not None:
            return self.slot_at_or_before(when) + timedelta(seconds=every)
        from croniter import croniter

        local = when.astimezone(ZoneInfo(self.timezone))
        nxt: datetime = croniter(expand(self.cron or ""), local).get_next(datetime)
        return nxt.astimezone(when.tzinfo)


def expand(expression: str) -> str:
    return SHORTCUTS.get(expression.strip().lower(), expression.strip())


def validate_cron(expression: str) -> None:
    """Five fields (minute hour day month weekday) or a shortcut, every value in range,
    and at least one date that matches (``0 0 31 2 *`` never comes)."""
    from croniter import CroniterBadDateError, croniter

    if not isinstance(expression, str):
        raise CronError(repr(expression), "a cron expression must be a string")
    text = expand(expression)
    fields = text.split()
    if len(fields) != 5:
        raise CronError(expression, f"expected five fields or a shortcut, got {len(fields)} fields")
    if not croniter.is_valid(text):
        raise CronError(expression, "a field is out of range or not cron syntax")
    try:
        croniter(text, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError as exc:
        raise CronError(expression, "no date ever matches it") from exc
