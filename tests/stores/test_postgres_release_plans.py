"""PostgreSQL: the releaser's statement (_jobs.RELEASE_DUE) reaches the due jobs by
their keys, never by reading the whole table.

With ``UPDATE ... WHERE id IN (SELECT ... LIMIT n)`` the planner, which expects up to
RELEASE_CAP due rows, joined them to a sequential scan of kiln_jobs (a hash semi join):
every call read the whole table, 770 ms a call with 1,000,000 jobs waiting, so 100,000
jobs falling due in one minute were released up to 800 at a time late
(bench/bench_scale.py --cases backlog). The ids now go in as an array (an InitPlan),
which the primary key answers.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from kiln.stores import Store
from kiln.stores.postgres._jobs import RELEASE_DUE
from tests.stores.pg_plans import plan_nodes, postgres_only

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

WAITING = 60_000  # scheduled over the next day
DUE = 8_000  # of them, due now (fewer than RELEASE_CAP: one call releases them)
pg_url = postgres_only("the plan is PostgreSQL's")


def plan_of(conn: psycopg.Connection, sql: str) -> dict:  # type: ignore[type-arg]
    # EXPLAIN without ANALYZE: the plan the releaser gets, nothing released
    rows = conn.execute(("EXPLAIN (FORMAT JSON) " + sql).encode()).fetchall()
    return rows[0][0][0]["Plan"]  # type: ignore[no-any-return]


async def test_the_release_reads_no_more_than_the_due_jobs(pg_url: str, store: Store) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
            " SELECT 'q' || (g %% 20), 'k', 'scheduled', '{}', CASE WHEN g <= %s"
            " THEN now() - interval '1 minute' ELSE now() + g * interval '1 second' END, 3"
            " FROM generate_series(1, %s) g", (DUE, WAITING))
        conn.execute("ANALYZE kiln_jobs")
        plan = plan_of(conn, RELEASE_DUE)
    scans = [n for n in plan_nodes(plan) if n.get("Relation Name") == "kiln_jobs"]
    assert scans and not [n for n in scans if n["Node Type"] == "Seq Scan"], json.dumps(plan)
    released = await store.jobs_release_due()
    assert sum(released.released.values()) == DUE
