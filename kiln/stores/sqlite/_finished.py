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

FINISHED = ("completed", "failed", "cancelled")


def _in(states: list[str]) -> str:
    return ", ".join(["?"] * len(states))


def finished(conn: sqlite3.Connection, states: tuple[str, ...], since: float, bucket: float,
             aligned: bool, by_queue: bool = False) -> list[Row]:
    """(queue, bucket, state, jobs) of the jobs in ``states`` finished in the last
    ``since`` seconds, as kiln.stores.postgres._finished.finished."""
    current, reads = _rollup.finished_reads(states, since, bucket, aligned, rolled_to(conn),
                                            time.time())
    if not reads:
        return []
    group = "queue" if by_queue else "''"

    def part(r: _rollup.FinishedRead) -> tuple[str, list[object]]:
        if r.rolled:
            return (f"SELECT {group}, ? - CAST(slot / ? AS INTEGER), state, SUM(jobs)"
                    f" FROM kiln_timings WHERE width = ? AND slot >= ? AND slot < ?"
                    f" AND state IN ({_in(r.states)}) GROUP BY 1, 2, 3",
                    [current, bucket, _rollup.MINUTE, r.start, r.end, *r.states])
        return (f"SELECT {group}, ? - CAST(finished_at / ? AS INTEGER), state, COUNT(*)"
                f" FROM kiln_jobs WHERE state IN ({_in(r.states)}) AND finished_at >= ?"
                " AND finished_at < ? GROUP BY 1, 2, 3",
                [current, bucket, *r.states, r.start, r.end])

    parts = [part(r) for r in reads]
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
