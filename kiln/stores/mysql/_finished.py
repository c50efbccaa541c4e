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

FINISHED = ("completed", "failed", "cancelled")


def _in(states: list[str]) -> str:
    return ", ".join(["%s"] * len(states))


def finished(states: tuple[str, ...], since: float, bucket: float, aligned: bool,
             by_queue: bool = False) -> Plan[list[Row]]:
    """(queue, bucket, state, jobs) of the jobs in ``states`` finished in the last
    ``since`` seconds, as kiln.stores.postgres._finished.finished."""
    out = yield one(f"SELECT ({MARK}), {NOW_S}")
    mark, now = out[0].rows[0][0], float(out[0].rows[0][1])
    current, reads = _rollup.finished_reads(states, since, bucket, aligned,
                                            None if mark is None else int(mark), now)
    if not reads:
        return []
    group = "queue" if by_queue else "''"

    def part(r: _rollup.FinishedRead) -> tuple[str, list[object]]:
        if r.rolled:
            return (f"SELECT {group}, %s - FLOOR(slot / %s), state, SUM(jobs) FROM kiln_timings"
                    f" WHERE width = %s AND slot >= %s AND slot < %s"
                    f" AND state IN ({_in(r.states)}) GROUP BY 1, 2, 3",
                    [current, bucket, _rollup.MINUTE, r.start, r.end, *r.states])
        return (f"SELECT {group}, %s - FLOOR({FINISHED_S} / %s), state, COUNT(*) FROM kiln_jobs"
                f" WHERE state IN ({_in(r.states)}) AND finished_at >= {at('%s')}"
                f" AND finished_at < {at('%s')} GROUP BY 1, 2, 3",
                [current, bucket, *r.states, int(r.start * 1_000_000),
                 int(r.end * 1_000_000)])

    parts = [part(r) for r in reads]
    out = yield one(" UNION ALL ".join(p[0] for p in parts),
                    *(a for p in parts for a in p[1]))
    return _rollup.merged(out[0].rows)


def throughput(since: float) -> Plan[dict[str, int]]:
    return _rollup.by_state((yield from finished(FINISHED, since, _rollup.MINUTE, False)))


def finished_series(since: float, bucket: float) -> Plan[list[tuple[int, str, int]]]:
    return _rollup.series((yield from finished(FINISHED, since, bucket, True)))


def completed_series_by_queue(since: float, bucket: float) -> Plan[list[tuple[str, int, int]]]:
    return _rollup.by_queue((yield from finished(("completed",), since, bucket, True, True)))
