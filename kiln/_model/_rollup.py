"""The timings rollup: finished jobs counted once, off the request path, so the charts
read a few thousand rows instead of every finished job of the range.

The leader's Roller (kiln._server.maintenance.roller) adds the completed and failed
jobs finished in [rolled_to, to) to ``kiln_timings`` and moves the watermark
``kiln_timings_mark.rolled_to`` to ``to``, in one transaction that holds the mark's
row lock: a crash leaves both as they were, and two leaders (a lease handed over)
roll one window each, never the same one twice. A row of ``kiln_timings`` is
(width, slot, queue, kind, state, run-time class, wait-time class, jobs): ``slot``
the start (unix seconds) of a WIDTHS-second slot, the classes those of
kiln._model._timings (so a percentile read from the rollup is the one read from the
jobs: the smallest class limit, about 1.5x apart, the job's duration is below).

A window ends LAG seconds before the database's now, on a minute, and covers at most
MAX_WINDOW seconds (a backlog is rolled in steps; the first roll of a database starts
START_BACK before now). The charts read the rollup's slots before the watermark and
the jobs finished since it directly (the tail, a few minutes), so they are as
current as before. The pruner deletes no finished job at or after the watermark (a
database never rolled: none younger than START_BACK plus an hour), so no job leaves
the table before it is counted. Rows are deleted after KEEP[width] seconds, past the
longest range that reads them. Pure; no I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable

MINUTE, QUARTER = 60, 900
WIDTHS = (MINUTE, QUARTER)
LAG = 60  # seconds: a window ends this long before now (a finish commits within it)
MAX_WINDOW = 3600  # seconds rolled in one transaction, at most
START_BACK = 7 * 86400 + 3 * 3600  # the first roll starts this long ago: the 7 d range
KEEP = {MINUTE: 7 * 3600, QUARTER: START_BACK}  # seconds a slot's rows are kept
UNROLLED_GRACE = 3600  # never rolled: the pruner keeps what is younger than START_BACK + this
STATES = ("completed", "failed")


def width_for(bucket: float) -> int:
    """The rollup width a chart bucket reads: minutes for 1 and 5 minute buckets (the
    1 h and 6 h ranges), quarters for 15 minutes and more (24 h, 7 d)."""
    return QUARTER if bucket >= QUARTER and bucket % QUARTER == 0 else MINUTE


def origin(rolled_to: int | None, now: float) -> int:
    """Where the next window may start: the watermark, or START_BACK ago (a quarter)."""
    return rolled_to if rolled_to is not None else int((now - START_BACK) // QUARTER) * QUARTER


def window(rolled_to: int | None, now: float, first: float | None = None
           ) -> tuple[int, int] | None:
    """The next window [from, to) to roll at ``now``, or None when caught up.
    ``first``: the earliest finish at or after ``origin`` (None: none), so a window
    skips the minutes before it, where there is nothing to count (a quiet night, a new
    database), and one with nothing before LAG ago only moves the watermark."""
    target = int((now - LAG) // MINUTE) * MINUTE
    start = origin(rolled_to, now)
    if target <= start:
        return None
    if first is None or first >= target:
        return start, target
    start = max(start, int(first // MINUTE) * MINUTE)
    return start, min(target, start + MAX_WINDOW)


def caught_up(to: int, now: float) -> bool:
    return window(to, now) is None


def prune_bound(rolled_to: int | None, now: float) -> float:
    """Unix seconds before which the pruner may delete a finished job: the watermark,
    or (never rolled) START_BACK plus UNROLLED_GRACE ago."""
    return float(rolled_to) if rolled_to is not None else now - START_BACK - UNROLLED_GRACE


def read_bounds(rolled_to: int | None, now: float, bucket: float, points: int
                ) -> tuple[int, int, float]:
    """(start, quarters_to, tail) for a read of ``points`` buckets of ``bucket`` seconds
    at ``now``: quarter rows in [start, quarters_to), minute rows in [quarters_to, tail),
    the jobs finished from ``tail`` on (the watermark, or start). No roll after the
    watermark was read changes a row in those ranges (a roll adds to the minutes from
    the watermark on and to the quarter that holds it), so the parts add up, whichever
    rolls commit between the watermark's read and the rows'."""
    start = int((now // bucket - points + 1) * bucket)
    tail = float(max(rolled_to if rolled_to is not None else start, start))
    quarters_to = start
    if width_for(bucket) == QUARTER:
        quarters_to = max(start, int(tail // QUARTER) * QUARTER)
    return start, quarters_to, tail


def expired(now: float) -> dict[int, int]:
    """Per width, the slot before which rows are deleted."""
    return {w: int(now - keep) for w, keep in KEEP.items()}


def finished_bounds(rolled_to: int | None, now: float, start: float, bucket: float
                    ) -> tuple[int, int]:
    """(from, to) for a count of the jobs finished since ``start`` (the dashboard's
    throughput and series, in buckets of ``bucket`` seconds): the rollup's minute rows
    in [from, to) count the completed and failed jobs finished there, the jobs
    finished in [start, from) and from ``to`` on are read directly (and every
    cancelled job: the rollup has none). ``from`` is the first minute at or after
    ``start``; the range is empty (from == to) when the rollup cannot serve: never
    rolled, a bucket that is not whole minutes (a minute row would straddle two), or a
    start older than the minute rows are kept. As read_bounds, no roll after the
    watermark was read changes a minute row before it."""
    first = math.ceil(start / MINUTE) * MINUTE
    if rolled_to is None or bucket % MINUTE or start < now - KEEP[MINUTE] + MINUTE:
        return first, first
    return first, max(first, rolled_to)


FAR = 1e11  # unix seconds past any finish: the open end of a read up to now


@dataclasses.dataclass(frozen=True, slots=True)
class FinishedRead:
    """One read of a finished count: the rollup's minute rows (``rolled``) or the jobs
    themselves, of ``states``, finished in [start, end) (unix seconds)."""

    rolled: bool
    states: list[str]
    start: float
    end: float


def finished_reads(states: Iterable[str], since: float, bucket: float, aligned: bool,
                   rolled_to: int | None, now: float) -> tuple[int, list[FinishedRead]]:
    """(the current bucket, the reads whose rows together count the jobs in ``states``
    finished in the last ``since`` seconds; none when there is nothing to count).
    ``aligned``: buckets on the epoch's multiples of ``bucket`` and the span whole
    buckets (the series); otherwise exactly ``since`` seconds back from ``now``
    (throughput). The rollup serves completed and failed jobs within finished_bounds;
    the head before it, the tail after it and every other state are read directly."""
    current = int(now // bucket)
    start = (current - int(since // bucket) + 1) * bucket if aligned else now - since
    lo, hi = finished_bounds(rolled_to, now, start, bucket)
    rolled = [s for s in states if s in STATES]
    other = [s for s in states if s not in STATES]
    reads: list[FinishedRead] = []
    if rolled and lo < hi:
        reads += [FinishedRead(True, rolled, lo, hi), FinishedRead(False, rolled, start, lo),
                  FinishedRead(False, rolled, hi, FAR)]
    elif rolled:
        reads.append(FinishedRead(False, rolled, start, FAR))
    if other:
        reads.append(FinishedRead(False, other, start, FAR))
    return current, reads if since > 0 else []


# the finished counts' rows, as every store's read of them answers (kiln.stores.*._finished):
# (queue, bucket, state, jobs), from the rollup's rows and the jobs read directly alike
Finished = tuple[str, int, str, int]


def merged(rows: Iterable[tuple[str, int, str, int]]) -> list[Finished]:
    """``rows`` with each (queue, bucket, state) once, its jobs summed; none at 0."""
    counted: Counter[tuple[str, int, str]] = Counter()
    for queue, bucket, state, n in rows:
        counted[(queue, int(bucket), state)] += int(n)
    return [(q, b, s, n) for (q, b, s), n in counted.items() if n]


def by_state(rows: Iterable[Finished]) -> dict[str, int]:
    """The throughput: jobs per state."""
    out: Counter[str] = Counter()
    for _queue, _bucket, state, n in rows:
        out[state] += n
    return dict(out)


def series(rows: Iterable[Finished]) -> list[tuple[int, str, int]]:
    """(bucket, state, jobs), the buckets before the first folded into it."""
    out: Counter[tuple[int, str]] = Counter()
    for _queue, bucket, state, n in rows:
        out[(max(bucket, 0), state)] += n
    return [(b, s, n) for (b, s), n in out.items()]


def by_queue(rows: Iterable[Finished]) -> list[tuple[str, int, int]]:
    """(queue, bucket, jobs), the buckets before the first folded into it."""
    out: Counter[tuple[str, int]] = Counter()
    for queue, bucket, _state, n in rows:
        out[(queue, max(bucket, 0))] += n
    return [(q, b, n) for (q, b), n in out.items()]
