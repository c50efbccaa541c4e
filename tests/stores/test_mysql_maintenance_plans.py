"""MySQL/MariaDB: each queue's oldest available job (the leader's and kilnotel's
``queue_oldest_available``, every 15 s) is one index descent per group of
kiln_jobs_claim, not a walk over every available job.

``GROUP BY queue`` with ``MIN(run_at)`` read the whole available range of
kiln_jobs_claim (state, queue, conc_key, priority, run_at, id), since run_at is not the
column after queue: 773 ms with 1,500,000 jobs available
(bench/results/backlog-mariadb-3m-*.jsonl, "maintenance"). Grouped by the index's
leading columns, MIN(run_at) is each group's first entry, which MariaDB reads with a
loose index scan ("Using index for group-by"). The test counts the index entries each
statement reads (Handler_read_*) on one table and compares their rows.
"""

from __future__ import annotations

from typing import Any

from kiln.stores import store_from_url
from kiln.stores.mysql._admin import OLDEST, scheduled_due
from kiln.stores.mysql._columns import NOW
from tests.plugins.databases import mysql_connect

OLD = (
    f"SELECT queue, GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(run_at), {NOW}), 0)"
    " FROM kiln_jobs WHERE state = 'available' GROUP BY queue"
)
JOBS = 40_000  # available, and as many scheduled
AT = "'2030-01-01 00:00:00'"  # "now", the same for both statements


def reads(cur: Any, sql: str, at: str = AT) -> tuple[int, list[tuple[Any, ...]]]:
    """Index entries and rows ``sql`` read (the session's Handler_read_* counters) at
    ``at`` for its "now", and its rows, sorted."""
    cur.execute("FLUSH STATUS")
    cur.execute(sql.replace(NOW, at))
    rows = sorted(cur.fetchall())
    cur.execute("SHOW SESSION STATUS LIKE 'Handler_read%'")
    return sum(int(v) for _, v in cur.fetchall()), rows


async def test_the_oldest_ages_are_a_descent_per_group(mysql_url: str) -> None:
    store = store_from_url(mysql_url)
    await store.open()
    await store.migrate()
    try:
        with mysql_connect(mysql_url) as conn, conn.cursor() as cur:
            # 20 queues, 3 priorities; a tenth of the jobs under one of 4 concurrency keys
            for state, at in (("available", "- INTERVAL seq SECOND"),
                              ("scheduled", "+ INTERVAL 1 DAY")):
                cur.execute(
                    "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata,"
                    " run_at, max_attempts, errors, created_at, priority, conc_key)"
                    f" SELECT CONCAT('q', seq % 20), 'k', '{state}', '{{}}', '{{}}', '{{}}',"
                    f" '2026-01-01' {at}, 3, '[]', UTC_TIMESTAMP(6), seq % 3,"
                    f" IF(seq % 10 = 0, CONCAT('c', seq % 4), NULL) FROM seq_1_to_{JOBS}")
            cur.execute("ANALYZE TABLE kiln_jobs")
            cur.fetchall()
            cur.execute("EXPLAIN " + OLDEST)
            plan = [str(r[-1]) for r in cur.fetchall()]
            new_reads, got = reads(cur, OLDEST)
            old_reads, want = reads(cur, OLD)
        assert [e for e in plan if "Using index for group-by" in e], plan
        # the old read visits the 40,000 available entries; the new one each of the
        # 20 queues' (conc_key, priority) groups' first entries (a few hundred)
        assert new_reads * 50 < old_reads, (new_reads, old_reads)
        assert got == want and len(got) == 20
        ages = await store.queue_oldest_available()
        assert sorted(ages) == sorted(f"q{n}" for n in range(20))
    finally:
        await store.close()


async def test_the_due_counts_read_only_the_due_jobs(mysql_url: str) -> None:
    """queue_scheduled_due (every 15 s) reads the due end of kiln_jobs_due (state,
    run_at) and each due job's row for its queue: what it counts, not the scheduled
    backlog (its 85 ms at 3,000,000 jobs were the tens of thousands of jobs the bench
    let fall due with no releaser running). A guard: no plan reads the others."""
    store = store_from_url(mysql_url)
    await store.open()
    await store.migrate()
    try:
        with mysql_connect(mysql_url) as conn, conn.cursor() as cur:
            cur.execute(  # 40,000 scheduled, 70 of them due
                "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata,"
                " run_at, max_attempts, errors, created_at) SELECT CONCAT('q', seq % 7),"
                " 'k', 'scheduled', '{}', '{}', '{}', IF(seq <= 70, UTC_TIMESTAMP(6)"
                " - INTERVAL 1 HOUR, UTC_TIMESTAMP(6) + INTERVAL 1 DAY), 3, '[]',"
                f" UTC_TIMESTAMP(6) FROM seq_1_to_{JOBS}")
            cur.execute("ANALYZE TABLE kiln_jobs")
            cur.fetchall()
            due_reads, rows = reads(cur, next(scheduled_due()).stmts[0].sql, NOW)
        assert due_reads < 200, due_reads
        assert rows == [(f"q{n}", 10) for n in range(7)]
        assert await store.queue_scheduled_due() == {f"q{n}": 10 for n in range(7)}
    finally:
        await store.close()
