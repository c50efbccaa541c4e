"""PostgreSQL: the tag and metadata filters use their indexes (migration 0007).

EXPLAIN of the statements the store runs (count, and the listing's statement for rare
matches, see _admin.tagged_list_stmts) over 10,000 jobs after ANALYZE: a selective tag
filter goes through kiln_jobs_tags, a metadata filter through kiln_jobs_metadata
(jsonb_path_ops), alongside the state index. Without the predicates the partial
indexes need, or with the wrong operator, the plan would be a sequential scan, and
these fail.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from kiln._model._job import JobFilter, JobState, NewJob
from kiln.stores import Store
from kiln.stores.postgres._admin import count_stmt, tagged_list_stmts
from kiln.stores.postgres._plan import Stmt
from tests.stores.pg_plans import postgres_only

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

JOBS = 10_000
pg_url = postgres_only("the other stores have no index on tags or metadata")


def _plan(url: str, stmt: Stmt) -> str:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("EXPLAIN (FORMAT JSON) " + stmt.sql, stmt.params).fetchall()
    return json.dumps(rows[0][0])


def _jobs() -> list[NewJob]:
    jobs = []
    for n in range(JOBS):
        tags = () if n % 5 == 0 else (f"region:{'eu' if n % 2 else 'us'}",) + (
            ("audit",) if n % 1000 == 7 else ())
        jobs.append(NewJob("k", {"n": n}, queue="q", tags=tags,
                           metadata={"otel": {"traceparent": f"00-{n:032x}-{n:016x}-01"},
                                     "tenant": n % 500}))
    return jobs


async def test_tag_and_metadata_filters_use_their_indexes(pg_url: str, store: Store) -> None:
    jobs = _jobs()
    for start in range(0, JOBS, 5000):
        await store.job_insert_many(jobs[start:start + 5000])
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE kiln_jobs")
    cases: list[tuple[dict[str, Any], list[str]]] = [
        ({"tags": ("audit",)}, ["kiln_jobs_tags"]),
        ({"metadata": {"tenant": 42}}, ["kiln_jobs_metadata"]),
        ({"tags": ("audit",), "metadata": {"tenant": 7}}, ["kiln_jobs_tags"]),
        ({"metadata": {"tenant": 42}, "states": (JobState.AVAILABLE,)}, ["kiln_jobs_metadata"]),
    ]
    for fields, indexes in cases:
        f = JobFilter(**fields)
        probe, rare = tagged_list_stmts(f, 50, None)
        assert "LIMIT 5000" in probe.sql  # the probe reads a bounded window, by the id index
        for stmt in (count_stmt(f), rare):
            plan = _plan(pg_url, stmt)
            for index in indexes:
                assert index in plan, (fields, stmt.sql, plan)
            assert "Seq Scan" not in plan, (fields, plan)
    # and they answer what the filters mean
    assert await store.job_count(JobFilter(tags=("audit",))) == JOBS // 1000
    assert await store.job_count(JobFilter(metadata={"tenant": 42})) == JOBS // 500
