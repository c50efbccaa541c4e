"""SQLite: the dashboard's counts of finished jobs (throughput, the overview's finished
series, the queues page's completed series) from the timings rollup, as
kiln.stores.postgres._finished does (kiln._model._rollup.finished_bounds): its minute
rows before the watermark, the jobs themselves (kiln_jobs_finished) for the head
before the first whole minute, the tail since the watermark and the cancelled jobs.
Functions of a connection; the clock is the host's (finished_at is unix seconds)."""

from __future__ import annotations

import sqlite3
import time

from kiln._model import _rollup
from kiln.stores.sqlite._rollup import rolled_to

Row = tuple[str, int, str, int]  # (queue, bucket, state, jobs)

FAR = 1e11  # unix seconds past any finish: an open end
FINISHED = ("completed", "failed", "cancelled")


def _in(states: list[str]) -> str:
    return ", ".join(["?"] * len(states))


def finished(conn: sqlite3.Connection, states: tuple[str, ...], since: float, bucket: float,
             aligned: bool, by_queue: bool = False) -> list[Row]:
    """(queue, bucket, state, jobs) of the jobs in ``states`` finished in the last
    ``since`` seconds, as kiln.stores.postgres._finished.finished."""
    now = time.time()
    current = int(now // bucket)
    start = (current - int(since // bucket) + 1) * bucket if aligned else now - since
    lo, hi = _rollup.finished_bounds(rolled_to(conn), now, start, bucket)
    rolled = [s for s in states if s in _rollup.STATES]
    other = [s for s in states if s not in _rollup.STATES]
    group = "queue" if by_queue else "''"
    parts: list[tuple[str, list[object]]] = []

    def direct(which: list[str], a: float, b: float) -> None:
        parts.append((
            f"SELECT {group}, ? - CAST(finished_at / ? AS INTEGER), state, COUNT(*)"
            f" FROM kiln_jobs WHERE state IN ({_in(which)}) AND finished_at >= ?"
            " AND finished_at < ? GROUP BY 1, 2, 3", [current, bucket, *which, a, b]))

    if rolled and lo < hi:
        parts.append((
            f"SELECT {group}, ? - CAST(slot / ? AS INTEGER), state, SUM(jobs) FROM kiln_timings"
            f" WHERE width = ? AND slot >= ? AND slot < ? AND state IN ({_in(rolled)})"
            " GROUP BY 1, 2, 3", [current, bucket, _rollup.MINUTE, lo, hi, *rolled]))
        direct(rolled, start, lo)
        direct(rolled, hi, FAR)
    elif rolled:
        direct(rolled, start, FAR)
    if other:
        direct(other, start, FAR)
    if not parts or since <= 0:
        return []
    rows = conn.execute(" UNION ALL ".join(p[0] for p in parts),
                        [a for p in parts for a in p[1]]).fetchall()
    return _rollup.merged(rows)


def throughput(conn: sqlite3.Connection, since: float) -> dict[str, int]:
    return _rollup.by_state(finished(conn, FINISHED, since, _rollup.MINUTE, False))


def finished_series(conn: sqlite3.Connection, since: float, bucket: float
                    ) -> list[tuple[int, str, int]]:
    return _rollup.series(finished(conn, FINISHED, since, bucket, True))


def completed_series_by_queue(conn: sqlite3.Connection, since: float, bucket: float
                              ) -> list[tuple[str, int, int]]:
    return _rollup.by_queue(finished(conn, ("completed",), since, bucket, True, True))
