"""MySQL/MariaDB: the dashboard's counts of finished jobs (throughput, the overview's
finished series, the queues page's completed series) from the timings rollup, as
kiln.stores.postgres._finished does (kiln._model._rollup.finished_bounds): its minute
rows before the watermark, the jobs themselves (kiln_jobs_finished) for the head
before the first whole minute, the tail since the watermark and the cancelled jobs.
Owns these statements; time is the database's (UTC_TIMESTAMP(6))."""

from __future__ import annotations

from kiln._model import _rollup
from kiln.stores.mysql._plan import Plan, one
from kiln.stores.mysql._rollup import FINISHED_S, MARK, NOW_S, at

Row = tuple[str, int, str, int]  # (queue, bucket, state, jobs)

FAR = 100_000_000_000  # unix seconds past any finish: an open end
FINISHED = ("completed", "failed", "cancelled")


def _in(states: list[str]) -> str:
    return ", ".join(["%s"] * len(states))


def finished(states: tuple[str, ...], since: float, bucket: float, aligned: bool,
             by_queue: bool = False) -> Plan[list[Row]]:
    """(queue, bucket, state, jobs) of the jobs in ``states`` finished in the last
    ``since`` seconds, as kiln.stores.postgres._finished.finished."""
    out = yield one(f"SELECT ({MARK}), {NOW_S}")
    mark, now = out[0].rows[0][0], float(out[0].rows[0][1])
    current = int(now // bucket)
    start = (current - int(since // bucket) + 1) * bucket if aligned else now - since
    lo, hi = _rollup.finished_bounds(None if mark is None else int(mark), now, start, bucket)
    rolled = [s for s in states if s in _rollup.STATES]
    other = [s for s in states if s not in _rollup.STATES]
    group = "queue" if by_queue else "''"
    parts: list[tuple[str, list[object]]] = []

    def direct(which: list[str], a: float, b: float) -> None:
        parts.append((
            f"SELECT {group}, %s - FLOOR({FINISHED_S} / %s), state, COUNT(*) FROM kiln_jobs"
            f" WHERE state IN ({_in(which)}) AND finished_at >= {at('%s')}"
            f" AND finished_at < {at('%s')} GROUP BY 1, 2, 3",
            [current, bucket, *which, int(a * 1_000_000), int(b * 1_000_000)]))

    if rolled and lo < hi:
        parts.append((
            f"SELECT {group}, %s - FLOOR(slot / %s), state, SUM(jobs) FROM kiln_timings"
            f" WHERE width = %s AND slot >= %s AND slot < %s AND state IN ({_in(rolled)})"
            " GROUP BY 1, 2, 3", [current, bucket, _rollup.MINUTE, lo, hi, *rolled]))
        direct(rolled, start, lo)
        direct(rolled, hi, FAR)
    elif rolled:
        direct(rolled, start, FAR)
    if other:
        direct(other, start, FAR)
    if not parts or since <= 0:
        return []
    out = yield one(" UNION ALL ".join(p[0] for p in parts),
                    *(a for p in parts for a in p[1]))
    return _rollup.merged(out[0].rows)


def throughput(since: float) -> Plan[dict[str, int]]:
    return _rollup.by_state((yield from finished(FINISHED, since, _rollup.MINUTE, False)))


def finished_series(since: float, bucket: float) -> Plan[list[tuple[int, str, int]]]:
    return _rollup.series((yield from finished(FINISHED, since, bucket, True)))


def completed_series_by_queue(since: float, bucket: float) -> Plan[list[tuple[str, int, int]]]:
    return _rollup.by_queue((yield from finished(("completed",), since, bucket, True, True)))
