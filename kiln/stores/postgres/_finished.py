"""PostgreSQL: the dashboard's counts of finished jobs (throughput of the last hour and
five minutes, the overview's finished series, the queues page's completed series)
from the timings rollup (kiln._model._rollup.finished_bounds): its minute rows for
the completed and failed jobs before the watermark, the jobs themselves through
kiln_jobs_finished (state, finished_at) for the minute's head before the first whole
minute, for the tail since the watermark and for the cancelled jobs (which the rollup
does not count). So a read costs a few thousand rollup rows plus the jobs of a minute
or two, not every job finished in the hour (580 ms at 1,000,000 jobs before,
bench/RESULTS.md). Owns these statements; time is the database's."""

from __future__ import annotations

from kiln._model import _rollup
from kiln.stores.postgres._plan import Plan, one
from kiln.stores.postgres._rollup import MARK_READ

Row = tuple[str, int, str, int]  # (queue, bucket, state, jobs)

ROLLED = ("SELECT {group}, %s - floor(slot / %s)::bigint, state, sum(jobs)::bigint"
          " FROM kiln_timings WHERE width = %s AND slot >= %s AND slot < %s"
          " AND state = ANY(%s::text[]) GROUP BY 1, 2, 3")
DIRECT = ("SELECT {group}, %s - floor(date_part('epoch', finished_at) / %s)::bigint, state,"
          " count(*) FROM kiln_jobs WHERE state = ANY(%s::text[])"
          " AND finished_at >= to_timestamp(%s) AND finished_at < to_timestamp(%s)"
          " GROUP BY 1, 2, 3")
FINISHED = ("completed", "failed", "cancelled")


def finished(states: tuple[str, ...], since: float, bucket: float, aligned: bool,
             by_queue: bool = False) -> Plan[list[Row]]:
    """(queue, bucket, state, jobs) of the jobs in ``states`` finished in the last
    ``since`` seconds; bucket 0 the current one. ``aligned``: buckets on the epoch's
    multiples of ``bucket`` and the span whole buckets (the series); otherwise the
    span is exactly ``since`` seconds back from now (throughput; buckets ignored).
    Without ``by_queue`` the queue is "" and the jobs' reads need only the index
    (an index-only scan where the visibility map allows)."""
    mark = (yield one(MARK_READ))[0][0]
    current, reads = _rollup.finished_reads(
        states, since, bucket, aligned, None if mark[0] is None else int(mark[0]),
        float(mark[1]))
    if not reads:
        return []
    parts = [(ROLLED, (current, bucket, _rollup.MINUTE, r.start, r.end, r.states)) if r.rolled
             else (DIRECT, (current, bucket, r.states, r.start, r.end)) for r in reads]
    group = "queue" if by_queue else "''"
    sql = " UNION ALL ".join(p[0].format(group=group) for p in parts)
    # planned for its bounds every time, as the charts' read (kiln.stores.postgres._rollup)
    rows = (yield one(sql, *(a for p in parts for a in p[1]), prepare=False))[0]
    return _rollup.merged(rows)


def throughput(since: float) -> Plan[dict[str, int]]:
    return _rollup.by_state((yield from finished(FINISHED, since, _rollup.MINUTE, False)))


def finished_series(since: float, bucket: float) -> Plan[list[tuple[int, str, int]]]:
    return _rollup.series((yield from finished(FINISHED, since, bucket, True)))


def completed_series_by_queue(since: float, bucket: float) -> Plan[list[tuple[str, int, int]]]:
    return _rollup.by_queue((yield from finished(("completed",), since, bucket, True, True)))

