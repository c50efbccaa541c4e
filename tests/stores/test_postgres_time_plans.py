"""PostgreSQL: a listing filtered by enqueue time uses the BRIN index over created_at
(migration 0009) when the range holds few jobs, instead of walking the id index.

EXPLAIN of the store's own listing statement (_admin.list_stmt) over 20,000 jobs after
ANALYZE: an "until" long before any job goes through kiln_jobs_created.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg
import pytest

from kiln._model._job import JobFilter, NewJob
from kiln.stores import Store
from kiln.stores.postgres._admin import list_stmt
from tests.stores.pg_plans import postgres_only

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

JOBS = 20_000
pg_url = postgres_only("the other stores have no index on created_at")


async def test_a_rare_time_range_uses_the_brin_index(pg_url: str, store: Store) -> None:
    jobs = [NewJob("k", {"n": n}, queue="q") for n in range(JOBS)]
    for start in range(0, JOBS, 5000):
        await store.job_insert_many(jobs[start:start + 5000])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE kiln_jobs")
        options = conn.execute("SELECT reloptions FROM pg_class WHERE relname ="
                               " 'kiln_jobs_created'").fetchone()
        assert options is not None and "autosummarize=on" in options[0]
        stmt = list_stmt(JobFilter(created_before=datetime(2000, 1, 1, tzinfo=UTC)), 51,
                         None, None)
        plan = json.dumps(conn.execute("EXPLAIN (FORMAT JSON) " + stmt.sql,
                                       stmt.params).fetchall()[0][0])
    assert "kiln_jobs_created" in plan, plan
    assert await store.job_list(JobFilter(created_before=datetime(2000, 1, 1, tzinfo=UTC)),
                                10) == []
