"""SQLite's timings rollup (kiln._model._rollup): roll the finished jobs of the next
window into kiln_timings, and read the charts from it plus the jobs finished since its
watermark. Functions of a connection, in the caller's transaction; the clock is the
host's (finished_at is unix seconds)."""

from __future__ import annotations

import sqlite3
import time

from kiln._model import _rollup
from kiln.stores._timings import MAX_TIMING_ROWS, TimingRow, case_sql

RUN, WAIT = case_sql("(finished_at - attempted_at)"), case_sql("(attempted_at - run_at)")
_KEY = "width, slot, queue, kind, state, run_class, wait_class"
_UPSERT = f" ON CONFLICT ({_KEY}) DO UPDATE SET jobs = kiln_timings.jobs + excluded.jobs"


def rolled_to(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT rolled_to FROM kiln_timings_mark WHERE name = 'default'"
                       ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def roll(conn: sqlite3.Connection) -> tuple[int, bool]:
    """Roll the next window (in the caller's write transaction): (jobs counted, caught
    up)."""
    now = time.time()
    mark = rolled_to(conn)
    if _rollup.window(mark, now) is None:
        return 0, True
    origin = _rollup.origin(mark, now)
    first = conn.execute(
        "SELECT (SELECT MIN(finished_at) FROM kiln_jobs WHERE state = 'completed'"
        " AND finished_at >= ?), (SELECT MIN(finished_at) FROM kiln_jobs"
        " WHERE state = 'failed' AND finished_at >= ?)", (origin, origin)).fetchone()
    found = [float(v) for v in first if v is not None]
    win = _rollup.window(mark, now, min(found) if found else None)
    if win is None:
        return 0, True
    start, to = win
    conn.execute("DROP TABLE IF EXISTS temp.kiln_roll")
    conn.execute(
        "CREATE TEMP TABLE kiln_roll AS SELECT CAST(finished_at / 60 AS INTEGER) * 60 AS slot,"
        f" queue, kind, state, {RUN} AS rc, {WAIT} AS wc, COUNT(*) AS n FROM kiln_jobs"
        " WHERE state IN ('completed', 'failed') AND finished_at >= ? AND finished_at < ?"
        " GROUP BY 1, 2, 3, 4, 5, 6", (start, to))
    conn.execute(f"INSERT INTO kiln_timings ({_KEY}, jobs) SELECT {_rollup.MINUTE}, slot,"
                 f" queue, kind, state, rc, wc, n FROM temp.kiln_roll WHERE true{_UPSERT}")
    conn.execute(f"INSERT INTO kiln_timings ({_KEY}, jobs) SELECT {_rollup.QUARTER},"
                 f" slot - slot % {_rollup.QUARTER} AS s, queue, kind, state, rc, wc, SUM(n)"
                 f" FROM temp.kiln_roll GROUP BY s, queue, kind, state, rc, wc{_UPSERT}")
    total = conn.execute("SELECT COALESCE(SUM(n), 0) FROM temp.kiln_roll").fetchone()[0]
    conn.execute("DROP TABLE temp.kiln_roll")
    conn.execute("UPDATE kiln_timings_mark SET rolled_to = ? WHERE name = 'default'", (to,))
    old = _rollup.expired(now)
    conn.execute("DELETE FROM kiln_timings WHERE (width = ? AND slot < ?)"
                 " OR (width = ? AND slot < ?)",
                 (_rollup.MINUTE, old[_rollup.MINUTE], _rollup.QUARTER, old[_rollup.QUARTER]))
    return int(total), _rollup.caught_up(to, now)


def prune_bound(conn: sqlite3.Connection, now: float) -> float:
    return _rollup.prune_bound(rolled_to(conn), now)


def timings(conn: sqlite3.Connection, since: float, bucket: float, by: str) -> list[TimingRow]:
    """The rollup's slots before its watermark and the jobs finished since, by ``by``
    (queue or kind), bucket (0: the current one, on the epoch's multiples of
    ``bucket``), state, run-time and wait-time class."""
    column = {"queue": "queue", "kind": "kind"}[by]
    now = time.time()
    start, quarters, tail = _rollup.read_bounds(rolled_to(conn), now, bucket,
                                                int(since // bucket))
    current = int(now // bucket)
    rows = conn.execute(
        f"SELECT {column}, ? - CAST(slot / ? AS INTEGER), state, run_class, wait_class,"
        " SUM(jobs) FROM kiln_timings WHERE (width = ? AND slot >= ? AND slot < ?)"
        " OR (width = ? AND slot >= ? AND slot < ?)"
        " GROUP BY 1, 2, 3, 4, 5"
        f" UNION ALL SELECT {column}, ? - CAST(finished_at / ? AS INTEGER), state, {RUN},"
        f" {WAIT}, COUNT(*) FROM kiln_jobs WHERE state IN ('completed', 'failed')"
        " AND finished_at >= ? GROUP BY 1, 2, 3, 4, 5 LIMIT ?",
        (current, bucket, _rollup.QUARTER, start, quarters, _rollup.MINUTE, quarters, tail,
         current, bucket, tail, MAX_TIMING_ROWS),
    ).fetchall()
    return [TimingRow(r[0], max(int(r[1]), 0), r[2], int(r[3]), int(r[4]), int(r[5]))
            for r in rows]
