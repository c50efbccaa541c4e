"""MySQL/MariaDB: a listing filtered by kind reads the kind's ranges of
kiln_jobs_state_kind, not the table (kiln.stores.mysql._listing).

``WHERE kind = %s ORDER BY id DESC LIMIT %s`` walked the primary key from the newest
job: the whole table for a kind with no job among the newest (2.0 s over 2,000,000
jobs; bench/RESULTS.md, "list45"). The handler reads (SHOW SESSION STATUS) of the
merged read are a few per state plus the page, where the old statement's are the
table; both give the same rows.
"""

from __future__ import annotations

from typing import Any

from kiln._model._job import JobFilter
from kiln.stores import store_from_url
from kiln.stores._filters import page
from kiln.stores.mysql._admin import BRIEF_COLS, FILTER_SQL, list_jobs
from tests.plugins.databases import mysql_connect

JOBS = 40_000  # over 100 kinds, and 30 jobs of kind "old" below them


def _reads(cur: Any, sql: str, params: list[Any]) -> tuple[int, list[int]]:
    """Rows the handler read for ``sql``, and the page's ids."""
    cur.execute("FLUSH STATUS")
    cur.execute(sql, params)
    ids = [int(r[0]) for r in cur.fetchall()]
    cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
    return sum(int(v) for _, v in cur.fetchall()), ids


async def test_a_kind_listing_reads_the_kind_s_ranges(mysql_url: str) -> None:
    store = store_from_url(mysql_url)
    await store.open()
    await store.migrate()
    await store.close()
    with mysql_connect(mysql_url) as conn, conn.cursor() as cur:
        for kind, state, n in (("'old'", "IF(seq % 3 = 0, 'failed', 'completed')", 30),
                               ("CONCAT('k', seq % 100)", "'available'", JOBS)):
            cur.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, run_at,"
                f" max_attempts, errors, created_at) SELECT 'q', {kind}, {state}, '{{}}',"
                " '{}', '{}', UTC_TIMESTAMP(6), 3, '[]', UTC_TIMESTAMP(6)"
                f" FROM seq_1_to_{n}")
        cur.execute("ANALYZE TABLE kiln_jobs")
        cur.fetchall()
        for f, limit, want_rows in ((JobFilter(kind="old"), 20, 20),
                                    (JobFilter(kind="none"), 51, 0),
                                    (JobFilter(kind="k7"), 51, 51)):
            sql, params = page(f, FILTER_SQL, BRIEF_COLS, None, None)
            old, want = _reads(cur, sql, [*params, limit])
            listed = next(list_jobs(f, limit, None, brief=True)).stmts[0]  # the store's
            new, got = _reads(cur, listed.sql, list(listed.params))
            assert got == want and len(got) == want_rows, f
            # each state's descent and its part of the page, then the union sorted
            # and the page's rows read by id: measured 149, 10 and 315 reads against
            # 40,020, 40,031 and 5,094 (1 kind in 100: 51 of them are 5,100 jobs back)
            assert new < 8 * limit + 20 and new * 10 < old, (f, new, old)
