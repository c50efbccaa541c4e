"""The charts page: per queue or per kind, throughput and run-time and wait-time
percentiles over a range the operator picks (1 h, 6 h, 24 h, 7 d), from the database
(the answer to "is it slow, and since when" where Prometheus is absent).

One grouped read per (range, grouping), cached by the Source for a time that grows
with the range; the stores read it from the timings rollup (kiln._model._rollup)
plus the jobs finished since its watermark (kiln._model._timings has the classes and
percentiles). Owns the view: the summary table, the series per bucket and the time
axis ticks. Pure; no I/O.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

from kiln._model._timings import GROUPINGS, TimingRow, percentiles
from kiln.web._params import BadRequest


@dataclasses.dataclass(frozen=True, slots=True)
class Range:
    name: str
    span: float  # seconds covered
    bucket: float  # seconds per point
    ttl: float  # seconds its read is cached
    tick_every: int  # buckets between two labelled ticks
    dated: bool  # ticks name the day too

    @property
    def points(self) -> int:
        return int(self.span // self.bucket)


RANGES: dict[str, Range] = {r.name: r for r in (
    Range("1h", 3600.0, 60.0, 5.0, 10, False),
    Range("6h", 6 * 3600.0, 300.0, 30.0, 12, False),
    Range("24h", 86400.0, 900.0, 60.0, 16, False),
    Range("7d", 7 * 86400.0, 7200.0, 300.0, 12, True),
)}
PS = (0.5, 0.95, 0.99)


def parse(params: Mapping[str, str]) -> tuple[Range, str, str | None]:
    """range, grouping ("queue" or "kind") and the group to chart (None: all)."""
    name = params.get("range") or "1h"
    if name not in RANGES:
        raise BadRequest(f"range must be one of {', '.join(RANGES)}, got {name[:40]!r}")
    by = params.get("by") or "queue"
    if by not in GROUPINGS:
        raise BadRequest(f"by must be queue or kind, got {by[:40]!r}")
    group = params.get("name") or None
    if group is not None and len(group) > 200:
        raise BadRequest("name is longer than 200 characters")
    return RANGES[name], by, group


@dataclasses.dataclass(frozen=True, slots=True)
class GroupTimings:
    """One queue's or kind's line of the summary."""

    name: str
    completed: int
    failed: int
    per_minute: float  # finished jobs per minute over the range
    run: tuple[float | None, ...]  # p50, p95, p99 (seconds, "at most")
    wait: tuple[float | None, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class Tick:
    at: float  # unix seconds of the bucket's start
    label: str  # UTC, as served (the browser may show local time instead)


@dataclasses.dataclass(frozen=True, slots=True)
class Timings:
    range: Range
    by: str
    group: str | None
    groups: list[GroupTimings]
    throughput: tuple[int, ...]  # finished jobs per bucket, oldest first
    failed: tuple[int, ...]
    run_p95: tuple[float, ...]  # per bucket (0 where none finished)
    wait_p95: tuple[float, ...]
    ticks: list[Tick]
    labels: list[str]  # one per bucket: its start time
    as_of: float

    def to_json(self) -> dict[str, object]:
        return {
            "range": self.range.name, "by": self.by, "name": self.group,
            "bucket_seconds": self.range.bucket, "span_seconds": self.range.span,
            "as_of": self.as_of,
            "groups": [{"name": g.name, "completed": g.completed, "failed": g.failed,
                        "per_minute": g.per_minute,
                        "run_seconds": _ps(g.run), "wait_seconds": _ps(g.wait)}
                       for g in self.groups],
            "series": {"finished": list(self.throughput), "failed": list(self.failed),
                       "run_p95_seconds": list(self.run_p95),
                       "wait_p95_seconds": list(self.wait_p95)},
        }


DAY = 86400.0


def _capped(seconds: float | None) -> float:
    """A bucket's percentile for a chart: 0 where none finished, a day at most."""
    return 0.0 if seconds is None else min(seconds, DAY)


def _seconds(value: float | None) -> float | str | None:
    """A percentile as JSON: null where none finished, "inf" beyond a day."""
    return "inf" if value is not None and value > DAY else value


def short_duration(seconds: float) -> str:
    """A class limit as the page writes it: 1.5ms, 300ms, 7s, 50min, 19.4h."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds < 120:
        return f"{seconds:g}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


def _label(at: float, dated: bool) -> str:
    return time.strftime("%a %H:%M" if dated else "%H:%M", time.gmtime(at))


def _ps(values: tuple[float | None, ...]) -> dict[str, float | str | None]:
    return {f"p{round(p * 100)}": _seconds(v) for p, v in zip(PS, values, strict=True)}


def view(rows: Sequence[TimingRow], rng: Range, by: str, group: str | None,
         as_of: float) -> Timings:
    by_group: dict[str, list[TimingRow]] = {}
    for r in rows:
        by_group.setdefault(r.group, []).append(r)
    minutes = rng.span / 60.0
    groups = []
    for name in sorted(by_group, key=lambda g: (-sum(r.jobs for r in by_group[g]), g)):
        mine = by_group[name]
        done = sum(r.jobs for r in mine if r.state == "completed")
        failed = sum(r.jobs for r in mine if r.state == "failed")
        groups.append(GroupTimings(name, done, failed, round((done + failed) / minutes, 2),
                                   percentiles(mine, "run", PS), percentiles(mine, "wait", PS)))
    chosen = [r for r in rows if group is None or r.group == group]
    n = rng.points
    per_bucket: list[list[TimingRow]] = [[] for _ in range(n)]
    for r in chosen:
        if 0 <= r.bucket < n:
            per_bucket[n - 1 - r.bucket].append(r)
    # buckets start on the epoch's multiples of their width, as the store counts them
    current = (as_of // rng.bucket) * rng.bucket
    starts = [current - (n - 1 - i) * rng.bucket for i in range(n)]
    # a tick at the start of every tick_every buckets: the page spaces them evenly
    ticks = [Tick(starts[i], _label(starts[i], rng.dated)) for i in range(0, n, rng.tick_every)]
    return Timings(
        range=rng, by=by, group=group, groups=groups,
        throughput=tuple(sum(r.jobs for r in b) for b in per_bucket),
        failed=tuple(sum(r.jobs for r in b if r.state == "failed") for b in per_bucket),
        run_p95=tuple(_capped(percentiles(b, "run", (0.95,))[0]) for b in per_bucket),
        wait_p95=tuple(_capped(percentiles(b, "wait", (0.95,))[0]) for b in per_bucket),
        ticks=ticks, labels=[_label(s, True) + " UTC" for s in starts], as_of=as_of,
    )
