"""PostgreSQL: the Kinds page's counts (``job_kind_counts``) read a bounded number of
rows however many jobs the table holds, exact up to the cap a state and estimated
(marked) above it.

The old statement (``job_counts_by_kind``, still the exact read) grouped every job:
272 ms for the Kinds page's first request at 1,000,000 jobs (bench/RESULTS.md).
EXPLAIN ANALYZE over the 30,040 jobs of tests/stores/test_postgres_count_plans.py: the
capped read returns at most cap + 1 rows per state, the old one every job.
"""

from __future__ import annotations

import psycopg
import pytest

from kiln._model._job import JobState
from kiln.stores import Store
from kiln.stores.postgres import _counts, _kind_counts
from tests.stores.pg_plans import postgres_only
from tests.stores.test_postgres_count_plans import fill, rows_read

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

CAP = 100
OLD = "SELECT kind, state, count(*) FROM kiln_jobs GROUP BY kind, state"
pg_url = postgres_only("the capped counts and their plans are PostgreSQL's")


def test_the_kind_counts_read_a_bounded_number_of_rows(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fill(conn)
        parts = len(_kind_counts.PARTS)
        new = rows_read(conn, _kind_counts.CAPPED, (CAP + 1,) * parts)
        old = rows_read(conn, OLD)
        assert new <= parts * (CAP + 1) < old, (new, old)


async def test_exact_up_to_the_cap_and_marked_estimates_above(
        pg_url: str, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fill(conn)  # 12,000 + 2,000 available, 10,000 scheduled, 3,040 failed, 3,000 done
        conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                     " SELECT 'q', 'rare', 'running', '{}', now(), 3"
                     " FROM generate_series(1, 7)")
        conn.execute("ANALYZE kiln_jobs")
    exact = {(k, s): n for k, s, n in await store.job_counts_by_kind()}
    whole = await store.job_kind_counts(CAP)  # a small table: the sample is all of it
    assert {(c.kind, c.state): c.count for c in whole} == exact
    assert not [c for c in whole if c.estimated]
    monkeypatch.setattr(_counts, "SAMPLE_PAGES", 20)  # a part of the table's pages
    capped = await store.job_kind_counts(CAP)
    assert {(c.kind, c.state) for c in capped} <= set(exact)  # no kind made up
    totals = {s: sum(n for (_k, st), n in exact.items() if st is s) for s in JobState}
    for key in set(exact) - {(c.kind, c.state) for c in capped}:
        # what a sample may miss: a kind rare among the many jobs of its state (the 40
        # failed jobs of queue "rare" among 3,040), never one under the cap
        assert exact[key] < totals[key[1]] / 20 and totals[key[1]] > CAP, key
    for c in capped:
        n = exact[(c.kind, c.state)]
        if c.state is JobState.RUNNING:  # 7 running jobs: under the cap, exact
            assert not c.estimated and c.count == n, c
        else:  # every other state holds thousands: estimated, not wildly off
            assert c.estimated and 0.4 * n < c.count < 2.5 * n, (c, n)
