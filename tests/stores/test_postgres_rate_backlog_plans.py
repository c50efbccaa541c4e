"""PostgreSQL: the rate keys furthest behind (kilnotel's per-key gauges, read every
``counts_ttl``) read a bounded number of rows however many rate-limited jobs wait.

The exact read grouped every due pending job: 1.3 to 1.5 s with 1,000,000 of them
(bench/RESULTS.md, "scale45"). The capped one (kiln.stores.postgres._rate_backlog)
descends kiln_jobs_pending once per key and counts each key's due jobs up to cap + 1,
estimating above the cap from a sample of a bounded number of pages. EXPLAIN ANALYZE
over 20,000 pending jobs sums the rows every scan of kiln_jobs returned: the capped
statement stays under its bound, the exact one (still the read without a cap) does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from kiln._model._job import RateLimit
from kiln.stores import Store
from kiln.stores.postgres import _rate_backlog
from tests.stores.pg_plans import postgres_only
from tests.stores.test_postgres_count_plans import first_sql, rows_read

pytestmark = pytest.mark.fresh_database  # the planner reads the tables' statistics

CAP = 100
KEYS = 8  # key t{n} holds 20,000 / 2**(n + 1) due jobs: t0 10,000 ... t7 78
pg_url = postgres_only("the capped rate backlog and its plan are PostgreSQL's")


def fill(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO kiln_rate_limits (key, rate, per, burst, tokens, updated_at)"
                 " SELECT 't' || k, 10, 1, 0, 0, now() FROM generate_series(0, 6) k")
    for n in range(KEYS):  # t7 is undeclared
        conn.execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts, rate_key)"
            " SELECT 'q', 'k', 'pending', '{}', now() - (g %% 997) * interval '1 second', 3,"
            " %s FROM generate_series(1, %s) g", (f"t{n}", 20_000 >> (n + 1)))
    # not due yet, and not pending: never counted
    conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
                 " rate_key) SELECT 'q', 'k', 'pending', '{}', now() + interval '1 hour', 3,"
                 " 'later' FROM generate_series(1, 3000)")
    conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
                 " rate_key) SELECT 'q', 'k', 'available', '{}', now(), 3, 't0'"
                 " FROM generate_series(1, 3000)")
    conn.execute("VACUUM ANALYZE kiln_jobs")


@pytest.fixture
def filled(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fill(conn)
        yield conn


def test_the_capped_backlog_reads_a_bounded_number_of_rows(
    filled: psycopg.Connection[Any],
) -> None:
    keys = KEYS + 1  # "later" has pending jobs, none due
    new = rows_read(filled, *first_sql(_rate_backlog.rate_keys_backlog(20, CAP)))
    old = rows_read(filled, *first_sql(_rate_backlog.rate_keys_backlog(20)))
    bound = keys * (CAP + 3)
    assert new <= bound < old, (new, bound, old)
    sample = rows_read(filled, _rate_backlog.SAMPLE, (1.0, ["t0", "t1"]))
    assert sample < 20_000 / 10


async def test_exact_up_to_the_cap_estimated_above(
    pg_url: str, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        fill(conn)
    limit = RateLimit(rate=10, per=1.0)
    exact = await store.rate_keys_backlog(20)
    assert exact == [(f"t{n}", None if n == 7 else limit, 20_000 >> (n + 1))
                     for n in range(KEYS)]
    # the table is smaller than SAMPLE_PAGES: the "sample" is the whole table, exact
    assert await store.rate_keys_backlog(20, cap=CAP) == exact
    monkeypatch.setattr(_rate_backlog, "SAMPLE_PAGES", 20)  # a part of the table's pages
    capped = await store.rate_keys_backlog(20, cap=CAP)
    assert [k for k, _, _ in capped][:4] == ["t0", "t1", "t2", "t3"]  # the big ones lead
    want = {k: n for k, _, n in exact}
    for key, got_limit, n in capped:
        assert got_limit == (None if key == "t7" else limit)
        if want[key] <= CAP:
            assert n == want[key], (key, n)
        else:  # an estimate, never below the cap, not wildly off at 20 pages
            assert n > CAP and (n == CAP + 1 or 0.4 * want[key] < n < 2.5 * want[key]), (
                key, n, want[key])
    assert [(k, n) for k, _, n in await store.rate_keys_backlog(2, cap=CAP)] == [
        (k, n) for k, _, n in capped[:2]]
