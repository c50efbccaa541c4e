"""Series: what the dashboard's charts draw, over the last hour, minute by minute.

Completed, failed and cancelled jobs per minute (minutes on the clock, the last the
current one) come from the database, cached like the other aggregates, and so do the
completed jobs per minute of each queue (the queues page's sparklines): the timings
rollup's minute rows before its watermark, the jobs since it and the cancelled ones
(kiln._model._rollup.finished_bounds). The backlog (jobs
available now, waiting for a worker) has no history in the database, so the Source
samples it each time it refreshes the counts: the chart covers the time this
dashboard process has been looked at, and says so. Pure data and its JSON; no I/O.
"""

from __future__ import annotations

import collections
import dataclasses

SPAN = 3600.0  # seconds the charts cover
BUCKET = 60.0  # seconds per point
POINTS = int(SPAN // BUCKET)
FINISHED = ("completed", "failed", "cancelled")


@dataclasses.dataclass(frozen=True, slots=True)
class Series:
    """Per finished state, POINTS counts, oldest first (the last is the current minute),
    and the backlog samples as (unix seconds, jobs available) pairs, oldest first."""

    finished: dict[str, tuple[int, ...]]
    backlog: tuple[tuple[float, int], ...]

    @classmethod
    def of(cls, rows: list[tuple[int, str, int]], backlog: tuple[tuple[float, int], ...]
           ) -> Series:
        finished = {state: [0] * POINTS for state in FINISHED}
        for ago, state, n in rows:
            if state in finished and 0 <= ago < POINTS:
                finished[state][POINTS - 1 - ago] += n
        return cls({s: tuple(v) for s, v in finished.items()}, backlog)

    def total(self, state: str) -> int:
        return sum(self.finished.get(state, ()))

    def to_json(self) -> dict[str, object]:
        return {
            "bucket_seconds": BUCKET, "span_seconds": SPAN,
            "finished": {s: list(v) for s, v in self.finished.items()},
            "backlog": [{"at": t, "available": n} for t, n in self.backlog],
        }


def per_queue(rows: list[tuple[str, int, int]]) -> dict[str, tuple[int, ...]]:
    """(queue, bucket, jobs) rows as POINTS counts per queue, oldest first."""
    out: dict[str, list[int]] = {}
    for queue, ago, n in rows:
        if 0 <= ago < POINTS:
            out.setdefault(queue, [0] * POINTS)[POINTS - 1 - ago] += n
    return {q: tuple(v) for q, v in out.items()}


class BacklogSamples:
    """The last hour of backlog samples, at most one per 5 seconds."""

    MIN_GAP = 5.0

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, at: float, available: int) -> None:
        if self._samples and at - self._samples[-1][0] < self.MIN_GAP:
            return
        self._samples.append((at, available))
        while self._samples and self._samples[0][0] < at - SPAN:
            self._samples.popleft()

    def snapshot(self) -> tuple[tuple[float, int], ...]:
        return tuple(self._samples)
