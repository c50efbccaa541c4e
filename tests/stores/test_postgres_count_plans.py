"""PostgreSQL: the counts the dashboard and kilnotel read every few seconds, and each
queue's oldest available job, read a bounded number of rows however many jobs wait.

The old statements grouped every job: the per-state ``GROUP BY`` over a million jobs
took 510 ms, the live states' counts 3.6 s every 5 s and ``queue_oldest_available``
1.9 s with 10,000,000 waiting (bench/RESULTS.md, "A large backlog"). The capped
counts (kiln.stores.postgres._counts) read at most cap + 1 index entries per queue and
state plus one descent per pair, and estimate above the cap from a sample of a bounded
number of pages; the oldest ages read one entry per (queue, kind, priority) group.
EXPLAIN ANALYZE over 30,000 jobs sums the rows every scan of kiln_jobs returned: each
new statement stays under its bound, and each old one (still here to compare) does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from kiln._model._job import JobState
from kiln.stores import Store
from kiln.stores.postgres import _counts
from kiln.stores.postgres._admin import AVAILABLE_PARTS, available_by_kind, state_counts
from kiln.stores.postgres._plan import Plan
from tests.stores.pg_plans import plan_nodes, postgres_only

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

CAP = 100
LIVE = (JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
        JobState.RUNNING, JobState.FAILED)
OLD_OLDEST = ("SELECT queue, greatest(extract(epoch FROM now() - min(n)), 0)::float8"
              f" FROM ({AVAILABLE_PARTS.format(agg='min(run_at)')}) AS a GROUP BY queue")
pg_url = postgres_only("the capped counts and their plans are PostgreSQL's")


def fill(conn: psycopg.Connection[Any]) -> None:
    def insert(n: int, queues: int, state: str, extra: str = "NULL") -> None:
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, priority,"
            " conc_key, finished_at) SELECT 'q' || (g %% %s), 'k' || (g %% 5), %s, '{}',"
            " now() - (g %% 997) * interval '1 second', 3, g %% 3, " + extra + ","
            " CASE WHEN %s IN ('completed', 'failed') THEN now() END"
            " FROM generate_series(1, %s) g", (queues, state, state, n))

    insert(12_000, 6, "available")
    insert(2_000, 2, "available", "'key' || (g %% 2)")  # limited: kiln_jobs_conc_available
    insert(10_000, 6, "scheduled")
    insert(3_000, 6, "failed")
    insert(3_000, 6, "completed")
    conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
                 " finished_at) SELECT 'rare', 'k', 'failed', '{}', now(), 3, now()"
                 " FROM generate_series(1, 40)")
    conn.execute("VACUUM ANALYZE kiln_jobs")


def rows_read(conn: psycopg.Connection[Any], sql: str, params: Any = ()) -> int:
    """Rows every scan of kiln_jobs read (returned or filtered out), over all its loops
    (EXPLAIN ANALYZE)."""
    plan = conn.execute(("EXPLAIN (ANALYZE, FORMAT JSON) " + sql).encode(),
                        params).fetchall()[0][0][0]["Plan"]
    scans = [n for n in plan_nodes(plan) if n.get("Relation Name") == "kiln_jobs"]
    assert scans, json.dumps(plan)
    return sum((int(n["Actual Rows"]) + int(n.get("Rows Removed by Filter", 0))
                + int(n.get("Rows Removed by Index Recheck", 0))) * int(n["Actual Loops"])
               for n in scans)


def first_sql(plan: Plan[Any]) -> tuple[str, tuple[Any, ...]]:
    stmt = next(plan).stmts[0]
    return stmt.sql, tuple(stmt.params)


@pytest.fixture
def filled(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fill(conn)
        yield conn


def test_the_capped_counts_read_a_bounded_number_of_rows(
    filled: psycopg.Connection[Any],
) -> None:
    jobs = filled.execute("SELECT count(*) FROM kiln_jobs").fetchone()
    assert jobs is not None and jobs[0] == 30_040
    pairs = filled.execute("SELECT count(DISTINCT (state, queue)) FROM kiln_jobs").fetchone()
    assert pairs is not None
    bound = pairs[0] * (CAP + 3) + CAP  # + the limited jobs' capped part
    for states in (None, LIVE):
        new = rows_read(filled, *first_sql(state_counts(states, CAP)))
        old = rows_read(filled, *first_sql(state_counts(states)))
        assert new <= bound < old, (states, new, bound, old)
    sample = rows_read(filled, _counts.SAMPLE, (1.0, ["available", "scheduled"]))
    assert sample < jobs[0] / 10


def test_the_available_jobs_by_kind_read_a_bounded_number_of_rows(
    filled: psycopg.Connection[Any],
) -> None:
    """What kilnotel reads every counts_ttl for kiln_jobs_unhandled."""
    pairs = 6 * 5  # (queue, kind) pairs of the plain available jobs
    new = rows_read(filled, *first_sql(available_by_kind(CAP)))
    old = rows_read(filled, *first_sql(available_by_kind()))
    assert new <= pairs * (CAP + 3) + CAP + 1 < old, (new, old)


def test_the_oldest_ages_read_one_entry_per_group(filled: psycopg.Connection[Any]) -> None:
    # (queue, kind, priority) groups of the plain jobs, (key, queue, priority) of the others
    groups = 6 * 5 * 3 + 2 * 2 * 3
    new = rows_read(filled, _counts.OLDEST)
    old = rows_read(filled, OLD_OLDEST)
    assert new <= 2 * groups + 2 < old, (new, groups, old)
    got = dict(filled.execute(_counts.OLDEST.encode()).fetchall())
    want = dict(filled.execute(OLD_OLDEST.encode()).fetchall())
    assert got.keys() == want.keys() and all(abs(got[q] - want[q]) < 1 for q in want)


async def test_exact_up_to_the_cap_and_marked_estimates_above(
    pg_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fill(conn)
    exact = {(c.queue, c.state): c.count for c in await store.job_counts()}
    # the table is smaller than SAMPLE_PAGES: the "sample" is the whole table, exact
    whole = await store.job_counts(cap=CAP)
    assert {(c.queue, c.state): c.count for c in whole} == exact
    assert not [c for c in whole if c.estimated]
    monkeypatch.setattr(_counts, "SAMPLE_PAGES", 20)  # a part of the table's pages
    for states in (None, LIVE):
        capped = await store.job_counts(states, cap=CAP)
        want = {k: v for k, v in exact.items() if states is None or k[1] in states}
        assert {(c.queue, c.state) for c in capped} == set(want)
        for c in capped:
            n = want[(c.queue, c.state)]
            if n <= CAP:
                assert not c.estimated and c.count == n, c
            else:  # an estimate, never below the cap, and not wildly off at 20 pages
                assert c.estimated and c.count > CAP and 0.4 * n < c.count < 2.5 * n, (c, n)
    by_kind = {(q, k): n for q, k, n in await store.jobs_available_by_kind()}
    for q, k, n in await store.jobs_available_by_kind(CAP):
        jobs = by_kind[(q, k)]  # 400 plain ones a pair, 500 limited: all over the cap
        assert n > CAP and 0.4 * jobs < n < 2.5 * jobs, (q, k, n, jobs)
    rare = [c for c in await store.job_counts(cap=CAP) if c.queue == "rare"]
    assert [(c.state, c.count, c.estimated) for c in rare] == [(JobState.FAILED, 40, False)]
