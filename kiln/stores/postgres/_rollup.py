"""PostgreSQL plans of the timings rollup (kiln._model._rollup): roll the finished jobs
of the next window into kiln_timings, and read the charts from it plus the jobs
finished since its watermark. Owns these statements; time is the database's."""

from __future__ import annotations

from kiln._model import _rollup
from kiln.stores._timings import MAX_TIMING_ROWS, TimingRow, width_bucket_sql
from kiln.stores.postgres._plan import Plan, Stmt, one, step

MARK_LOCK = ("SELECT rolled_to, date_part('epoch', now()) FROM kiln_timings_mark"
             " WHERE name = 'default' FOR UPDATE")
MARK_READ = ("SELECT (SELECT rolled_to FROM kiln_timings_mark WHERE name = 'default'),"
             " date_part('epoch', now())")
RUN = width_bucket_sql("date_part('epoch', finished_at - attempted_at)")
WAIT = width_bucket_sql("date_part('epoch', attempted_at - run_at)")
_KEY = "width, slot, queue, kind, state, run_class, wait_class"
_UPSERT = f" ON CONFLICT ({_KEY}) DO UPDATE SET jobs = kiln_timings.jobs + excluded.jobs"
# the window's jobs per minute, then those minutes per quarter: one statement
ROLL = (
    "WITH agg AS (SELECT (floor(date_part('epoch', finished_at) / 60) * 60)::bigint AS slot,"
    f" queue, kind, state, {RUN} AS rc, {WAIT} AS wc, count(*) AS n FROM kiln_jobs"
    " WHERE state IN ('completed', 'failed') AND finished_at >= to_timestamp(%s)"
    " AND finished_at < to_timestamp(%s) GROUP BY 1, 2, 3, 4, 5, 6),"
    f" m AS (INSERT INTO kiln_timings ({_KEY}, jobs)"
    f" SELECT {_rollup.MINUTE}, slot, queue, kind, state, rc, wc, n FROM agg{_UPSERT}),"
    f" q AS (INSERT INTO kiln_timings ({_KEY}, jobs)"
    f" SELECT {_rollup.QUARTER}, slot - slot %% {_rollup.QUARTER}, queue, kind, state, rc, wc,"
    f" sum(n) FROM agg GROUP BY 2, 3, 4, 5, 6, 7{_UPSERT})"
    " SELECT coalesce(sum(n), 0)::bigint FROM agg"
)
# the earliest finish at or after a time (the index on (state, finished_at), per state)
FIRST = (
    "SELECT date_part('epoch', least("
    "(SELECT min(finished_at) FROM kiln_jobs WHERE state = 'completed'"
    " AND finished_at >= to_timestamp(%s)),"
    " (SELECT min(finished_at) FROM kiln_jobs WHERE state = 'failed'"
    " AND finished_at >= to_timestamp(%s))))"
)
# the timings rollup's watermark (kiln._model._rollup.prune_bound), for the pruner: no
# finished job leaves the table before the rollup has counted it
PRUNE_BOUND = (
    "coalesce((SELECT to_timestamp(rolled_to) FROM kiln_timings_mark WHERE name = 'default'),"
    f" now() - {_rollup.START_BACK + _rollup.UNROLLED_GRACE} * interval '1 second')"
)
MARK_SET = "UPDATE kiln_timings_mark SET rolled_to = %s WHERE name = 'default'"
EXPIRE = ("DELETE FROM kiln_timings WHERE (width = %s AND slot < %s)"
          " OR (width = %s AND slot < %s)")


def roll() -> Plan[tuple[int, bool]]:
    """Roll the next window: (jobs counted, caught up). One transaction, under the
    mark's row lock."""
    rows = (yield step(Stmt(MARK_LOCK)))[0]
    if not rows:
        return 0, True
    rolled_to, now = rows[0][0], float(rows[0][1])
    mark = None if rolled_to is None else int(rolled_to)
    if _rollup.window(mark, now) is None:
        return 0, True
    origin = _rollup.origin(mark, now)
    first = (yield step(Stmt(FIRST, (origin, origin))))[0][0][0]
    win = _rollup.window(mark, now, None if first is None else float(first))
    if win is None:
        return 0, True
    start, to = win
    old = _rollup.expired(now)
    out = yield step(
        Stmt(ROLL, (start, to)), Stmt(MARK_SET, (to,)),
        Stmt(EXPIRE, (_rollup.MINUTE, old[_rollup.MINUTE], _rollup.QUARTER,
                      old[_rollup.QUARTER])),
        last=True,
    )
    return int(out[0][0][0]), _rollup.caught_up(to, now)


def rolled_to() -> Plan[int | None]:
    rows = (yield one(MARK_READ))[0]
    return None if rows[0][0] is None else int(rows[0][0])


def timings(since: float, bucket: float, by: str) -> Plan[list[TimingRow]]:
    """Finished (completed, failed) jobs of the last ``since`` seconds by ``by`` (queue
    or kind), bucket (0: the current one, on the epoch's multiples of ``bucket``),
    state, run-time and wait-time class: the rollup's slots before its watermark and
    the jobs finished since (kiln._model._rollup)."""
    column = {"queue": "queue", "kind": "kind"}[by]
    mark = (yield one(MARK_READ))[0][0]
    now = float(mark[1])
    start, quarters, tail = _rollup.read_bounds(
        None if mark[0] is None else int(mark[0]), now, bucket, int(since // bucket))
    current = int(now // bucket)
    sql = (
        f"SELECT {column}, %s - floor(slot / %s)::bigint, state, run_class, wait_class,"
        " sum(jobs)::bigint FROM kiln_timings WHERE (width = %s AND slot >= %s AND slot < %s)"
        " OR (width = %s AND slot >= %s AND slot < %s)"
        " GROUP BY 1, 2, 3, 4, 5"
        f" UNION ALL SELECT {column}, %s - floor(date_part('epoch', finished_at) / %s)::bigint,"
        f" state, {RUN}, {WAIT}, count(*) FROM kiln_jobs"
        " WHERE state IN ('completed', 'failed') AND finished_at >= to_timestamp(%s)"
        " GROUP BY 1, 2, 3, 4, 5 LIMIT %s"
    )
    # planned for its bounds every time (never a generic plan): prepared, PostgreSQL may
    # settle on one that scans every finished job for the tail of a minute or two
    rows = (yield one(sql, current, bucket, _rollup.QUARTER, start, quarters,
                      _rollup.MINUTE, quarters, tail, current, bucket, tail, MAX_TIMING_ROWS,
                      prepare=False))[0]
    return [TimingRow(r[0], max(int(r[1]), 0), r[2], int(r[3]), int(r[4]), int(r[5]))
            for r in rows]
