"""PostgreSQL: the admission's write is not planned again at every admission.

With table statistics, a plan that saw the ids' array estimated its length and looked
cheaper than the generic plan, so PostgreSQL planned the statement at every admission
(0 generic plans of 3,273 admissions in a drain of rate-limited jobs). The ids (and
their admission offsets) now go through subqueries the planner does not flatten.
"""

from __future__ import annotations

import psycopg
import pytest

from kiln.stores import Store
from kiln.stores.postgres._rates import ADMIT_WRITE
from tests.stores.pg_plans import postgres_only

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

pg_url = postgres_only("a plan check of its admission statement")


async def test_the_admission_write_runs_its_generic_plan(pg_url: str, store: Store) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, rate_key)"
            " SELECT 'q', 'k', 'pending', '{}', now(), 25, 'r' FROM generate_series(1, 3000)")
        conn.execute(  # most of a busy table is other jobs, done or waiting
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
            " SELECT 'q', 'k', CASE WHEN g % 2 = 0 THEN 'completed' ELSE 'available' END,"
            " '{}', now(), 25 FROM generate_series(1, 20000) g")
        conn.execute("ANALYZE kiln_jobs")
        for first in range(1, 11):  # ten admissions of one job each, as a backlog's go
            ids = [first]
            rows = conn.execute(ADMIT_WRITE, ("2026-01-01", "2026-01-01", ids, [0]),
                                prepare=True).fetchall()
            assert [r[0] for r in rows] == ids
        plans = conn.execute("SELECT generic_plans, custom_plans FROM pg_prepared_statements"
                             " WHERE statement LIKE 'WITH adm AS%%'").fetchall()
    assert plans and plans[0][0] >= 5, plans
