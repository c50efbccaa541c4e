"""MySQL/MariaDB plans of the timings rollup (kiln._model._rollup): roll the finished
jobs of the next window into kiln_timings, and read the charts from it plus the jobs
finished since its watermark. The window's jobs are read by a consistent (non-locking)
read, then their counts written as rows: an INSERT ... SELECT would lock the jobs it
reads. Owns these statements; time is the database's (UTC_TIMESTAMP(6))."""

from __future__ import annotations

from typing import Any

from kiln._model import _rollup
from kiln.stores._timings import MAX_TIMING_ROWS, TimingRow, case_sql
from kiln.stores.mysql._columns import NOW
from kiln.stores.mysql._plan import Plan, Stmt, one, step

EPOCH = "'1970-01-01 00:00:00'"
NOW_S = f"TIMESTAMPDIFF(MICROSECOND, {EPOCH}, {NOW}) / 1000000"
FINISHED_S = f"TIMESTAMPDIFF(MICROSECOND, {EPOCH}, finished_at) / 1000000"
RUN = case_sql("TIMESTAMPDIFF(MICROSECOND, attempted_at, finished_at) / 1000000")
WAIT = case_sql("TIMESTAMPDIFF(MICROSECOND, run_at, attempted_at) / 1000000")
FINISHED_MIN = (f"TIMESTAMPDIFF(MICROSECOND, {EPOCH}, MIN(finished_at)) / 1000000"
                " FROM kiln_jobs")
MARK = "SELECT rolled_to FROM kiln_timings_mark WHERE name = 'default'"
_KEY = "width, slot, queue, kind, state, run_class, wait_class"
CHUNK = 500  # rows per INSERT


def at(seconds: Any) -> str:
    """SQL for the DATETIME ``seconds`` (a placeholder) after the epoch."""
    return f"TIMESTAMPADD(MICROSECOND, {seconds}, {EPOCH})"


def roll() -> Plan[tuple[int, bool]]:
    """Roll the next window: (jobs counted, caught up). One transaction, under the
    mark's row lock."""
    out = yield step(Stmt(f"SELECT rolled_to, {NOW_S} FROM kiln_timings_mark"
                          " WHERE name = 'default' FOR UPDATE"), begin=True)
    if not out[0].rows:
        return 0, True
    rolled, now = out[0].rows[0][0], float(out[0].rows[0][1])
    mark = None if rolled is None else int(rolled)
    if _rollup.window(mark, now) is None:
        return 0, True
    origin = _rollup.origin(mark, now) * 1_000_000
    out = yield step(Stmt(
        f"SELECT (SELECT {FINISHED_MIN} WHERE state = 'completed' AND finished_at >= {at('%s')}),"
        f" (SELECT {FINISHED_MIN} WHERE state = 'failed' AND finished_at >= {at('%s')})",
        (origin, origin)))
    found = [float(v) for v in out[0].rows[0] if v is not None]
    win = _rollup.window(mark, now, min(found) if found else None)
    if win is None:
        return 0, True
    start, to = win
    out = yield step(Stmt(
        f"SELECT CAST(FLOOR({FINISHED_S} / 60) * 60 AS SIGNED), queue, kind, state,"
        f" {RUN}, {WAIT}, COUNT(*) FROM kiln_jobs WHERE state IN ('completed', 'failed')"
        f" AND finished_at >= {at('%s')} AND finished_at < {at('%s')}"
        " GROUP BY 1, 2, 3, 4, 5, 6", (start * 1_000_000, to * 1_000_000)))
    minutes = [(_rollup.MINUTE, int(r[0]), r[1], r[2], r[3], int(r[4]), int(r[5]), int(r[6]))
               for r in out[0].rows]
    quarters: dict[tuple[Any, ...], int] = {}
    for _w, slot, *rest, n in minutes:
        key = (_rollup.QUARTER, slot - slot % _rollup.QUARTER, *rest)
        quarters[key] = quarters.get(key, 0) + n
    rows = [*minutes, *((*k, n) for k, n in quarters.items())]
    stmts = [
        Stmt(f"INSERT INTO kiln_timings ({_KEY}, jobs) VALUES "
             + ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(part))
             + " ON DUPLICATE KEY UPDATE jobs = jobs + VALUES(jobs)",
             tuple(v for row in part for v in row))
        for part in (rows[i:i + CHUNK] for i in range(0, len(rows), CHUNK))
    ]
    old = _rollup.expired(now)
    yield step(
        *stmts,
        Stmt("UPDATE kiln_timings_mark SET rolled_to = %s WHERE name = 'default'", (to,)),
        Stmt("DELETE FROM kiln_timings WHERE (width = %s AND slot < %s)"
             " OR (width = %s AND slot < %s)",
             (_rollup.MINUTE, old[_rollup.MINUTE], _rollup.QUARTER, old[_rollup.QUARTER])),
        last=True,
    )
    return sum(r[-1] for r in minutes), _rollup.caught_up(to, now)


def rolled_to() -> Plan[int | None]:
    out = yield one(MARK)
    rows = out[0].rows
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def prune_bound() -> Plan[float]:
    """Unix seconds before which the pruner may delete (kiln._model._rollup)."""
    out = yield one(f"SELECT ({MARK}), {NOW_S}")
    rolled, now = out[0].rows[0]
    return _rollup.prune_bound(None if rolled is None else int(rolled), float(now))


def timings(since: float, bucket: float, by: str) -> Plan[list[TimingRow]]:
    """The rollup's slots before its watermark and the jobs finished since, by ``by``
    (queue or kind), bucket (0: the current one, on the epoch's multiples of
    ``bucket``), state, run-time and wait-time class."""
    column = {"queue": "queue", "kind": "kind"}[by]
    out = yield one(f"SELECT ({MARK}), {NOW_S}")
    rolled, now = out[0].rows[0][0], float(out[0].rows[0][1])
    start, quarters, tail = _rollup.read_bounds(None if rolled is None else int(rolled), now,
                                                bucket, int(since // bucket))
    current = int(now // bucket)
    out = yield one(
        f"SELECT {column}, %s - FLOOR(slot / %s), state, run_class, wait_class, SUM(jobs)"
        " FROM kiln_timings WHERE (width = %s AND slot >= %s AND slot < %s)"
        " OR (width = %s AND slot >= %s AND slot < %s)"
        " GROUP BY 1, 2, 3, 4, 5"
        f" UNION ALL SELECT {column}, %s - FLOOR({FINISHED_S} / %s), state, {RUN}, {WAIT},"
        " COUNT(*) FROM kiln_jobs WHERE state IN ('completed', 'failed')"
        f" AND finished_at >= {at('%s')} GROUP BY 1, 2, 3, 4, 5 LIMIT %s",
        current, bucket, _rollup.QUARTER, start, quarters, _rollup.MINUTE, quarters, tail,
        current, bucket, int(tail * 1_000_000), MAX_TIMING_ROWS,
    )
    return [TimingRow(r[0], max(int(r[1]), 0), r[2], int(r[3]), int(r[4]), int(r[5]))
            for r in out[0].rows]
