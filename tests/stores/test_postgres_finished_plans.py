"""PostgreSQL: the dashboard's counts of finished jobs (throughput, the overview's
finished series, the queues page's completed series) read the timings rollup and the
jobs of a minute or two, not every job finished in the hour.

The old statements grouped every job finished in the span: 357 ms for the finished
series, 223 for the completed series by queue at 1,000,000 jobs, and the overview's
first request after the counts expired took 580 ms (bench/RESULTS.md). EXPLAIN ANALYZE
over 20,000 jobs finished in the last 50 minutes, rolled: the rows every scan of
kiln_jobs returned stay under the jobs of the tail since the watermark plus the
cancelled ones with each new statement, and each old one (here to compare) reads them
all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from kiln.stores import Store
from kiln.stores.postgres import _finished
from kiln.stores.postgres._plan import Plan
from tests.stores.pg_plans import postgres_only
from tests.stores.test_postgres_count_plans import rows_read

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

pg_url = postgres_only("the plans are PostgreSQL's")
OLD = {  # the statements before the rollup served them (kiln.stores.postgres._admin)
    "throughput": (
        "SELECT state, count(*) FROM kiln_jobs WHERE state IN ('completed', 'failed',"
        " 'cancelled') AND finished_at >= now() - %s * interval '1 second' GROUP BY state",
        (3600.0,)),
    "finished_series": (
        "SELECT floor(extract(epoch FROM now() - finished_at) / %s)::int AS b, state,"
        " count(*) FROM kiln_jobs WHERE state IN ('completed', 'failed', 'cancelled')"
        " AND finished_at >= now() - %s * interval '1 second' GROUP BY b, state",
        (60.0, 3600.0)),
    "completed_series_by_queue": (
        "SELECT queue, floor(extract(epoch FROM now() - finished_at) / %s)::int AS b,"
        " count(*) FROM kiln_jobs WHERE state = 'completed'"
        " AND finished_at >= now() - %s * interval '1 second' GROUP BY queue, b",
        (60.0, 3600.0)),
}
NEW: dict[str, Callable[[], Plan[Any]]] = {
    "throughput": lambda: _finished.throughput(3600.0),
    "finished_series": lambda: _finished.finished_series(3600.0, 60.0),
    "completed_series_by_queue": lambda: _finished.completed_series_by_queue(3600.0, 60.0),
}


def counts_sql(conn: psycopg.Connection[Any], plan: Plan[Any]) -> tuple[str, tuple[Any, ...]]:
    """The plan's counting statement, after its first (the watermark and now) ran."""
    first = next(plan).stmts[0]
    rows = conn.execute(first.sql.encode(), first.params).fetchall()
    stmt = plan.send([rows]).stmts[0]
    return stmt.sql, tuple(stmt.params)


async def test_the_finished_counts_read_the_tail_not_the_hour(
        pg_url: str, store: Store) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " attempted_at, finished_at) SELECT 'q' || (g % 4), 'k', CASE WHEN g % 50 = 0"
            " THEN 'cancelled' WHEN g % 10 = 0 THEN 'failed' ELSE 'completed' END, '{}',"
            " t - interval '1 second', 3, t, t FROM (SELECT g, now() - (g % 3000)"
            " * interval '1 second' AS t FROM generate_series(1, 20000) g) AS s")
        conn.execute("VACUUM ANALYZE kiln_jobs")
        while not (await store.timings_roll())[1]:
            pass
        conn.execute("ANALYZE kiln_timings")
        tail = conn.execute(
            "SELECT count(*) FILTER (WHERE finished_at >= to_timestamp(rolled_to)),"
            " count(*) FILTER (WHERE state = 'cancelled') FROM kiln_jobs, kiln_timings_mark"
        ).fetchone()
        assert tail is not None and 0 < tail[0] < 2000, tail
        bound = tail[0] + tail[1]
        for name, plan in NEW.items():
            new = rows_read(conn, *counts_sql(conn, plan()))
            old = rows_read(conn, *OLD[name])
            assert new <= bound < old, (name, new, bound, old)
