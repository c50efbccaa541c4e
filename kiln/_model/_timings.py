"""Run and wait times as the dashboard charts them: duration classes and percentiles.

A store groups finished jobs by (queue or kind, time bucket, state, run-time class,
wait-time class) in one GROUP BY (``case_sql`` writes the class of a duration in
seconds, the same on every dialect); the percentiles are then read from those
histograms. A class is the smallest of ``LIMITS`` (1 ms to 1 day, about 1.5x apart)
the duration is below, so a percentile reads "under" that limit: exact to the class,
never more (PostgreSQL's ``width_bucket`` over LIMITS gives the same class). Run time
is finished_at - attempted_at (the last attempt); wait time is attempted_at - run_at
(from due to started). Pure; no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

LIMITS: tuple[float, ...] = (
    *(round(m * 10.0**e, 6) for e in range(-3, 5) for m in (1, 1.5, 2, 3, 5, 7)), 86400.0)
OVER = len(LIMITS)  # the class of a duration beyond a day
NONE = -1  # no duration (a job that never started)
GROUPINGS = ("queue", "kind")


def case_sql(expr: str) -> str:
    """SQL for the class of the duration ``expr`` (seconds): NONE for NULL, 0 below
    LIMITS[0] (negative ones included), ..., OVER for a day or more."""
    whens = " ".join(f"WHEN {expr} < {limit!r} THEN {i}" for i, limit in enumerate(LIMITS))
    return f"(CASE WHEN {expr} IS NULL THEN {NONE} {whens} ELSE {OVER} END)"


def width_bucket_sql(expr: str) -> str:
    """The same class on PostgreSQL, ``expr`` a double precision: width_bucket counts
    the limits at or below it (a binary search, not 49 comparisons)."""
    limits = ",".join(repr(limit) for limit in LIMITS)
    return f"coalesce(width_bucket({expr}, '{{{limits}}}'::float8[]), {NONE})"


def upper(cls: int) -> float:
    """The limit every duration of class ``cls`` is below (a day or more: infinity)."""
    return LIMITS[cls] if 0 <= cls < OVER else float("inf")


def percentile(histogram: dict[int, int], p: float) -> float | None:
    """The ``p`` quantile (0 < p <= 1) of a class histogram, as the limit its class is
    below; None for an empty one."""
    total = sum(n for c, n in histogram.items() if c != NONE)
    if not total:
        return None
    need, seen = p * total, 0
    for cls in sorted(c for c in histogram if c != NONE):
        seen += histogram[cls]
        if seen >= need:
            return upper(cls)
    return upper(OVER)


@dataclasses.dataclass(frozen=True, slots=True)
class TimingRow:
    """One row of a store's grouped timings read."""

    group: str  # the queue or kind
    bucket: int  # 0: the latest bucket, 1 the one before, ...
    state: str  # completed or failed
    run: int  # run-time class
    wait: int  # wait-time class
    jobs: int


def merge(rows: Iterable[TimingRow], attr: str) -> dict[int, int]:
    out: dict[int, int] = {}
    for r in rows:
        cls = getattr(r, attr)
        out[cls] = out.get(cls, 0) + r.jobs
    return out


def percentiles(rows: Sequence[TimingRow], attr: str,
                ps: Sequence[float] = (0.5, 0.95, 0.99)) -> tuple[float | None, ...]:
    histogram = merge(rows, attr)
    return tuple(percentile(histogram, p) for p in ps)
