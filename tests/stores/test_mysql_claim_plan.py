"""MySQL/MariaDB: the plain claim walks its own queue's part of kiln_jobs_claim.

With 20 queues of available jobs in one table (bench/scale_backlog.py, 3,000,000
waiting), MariaDB planned the claim on kiln_jobs_conc (state, conc_key, priority,
run_at, id): every queue's available jobs in claim order, filtered to the queue. A
queue drained by its workers then walked past all of the other queues' jobs older than
its own remaining ones, more at every claim: 6 s a claim half way through draining one
queue's 75,000 jobs (bench/RESULTS.md, "scale45"). EXPLAIN of the store's own claim
statement over 20 queues of jobs, analyzed: it must use kiln_jobs_claim.
"""

from __future__ import annotations

from kiln.stores import store_from_url
from kiln.stores.mysql._jobs import claim
from tests.plugins.databases import mysql_connect

QUEUES = 20
JOBS = 200_000  # available, and as many scheduled


async def test_the_claim_uses_its_queue_s_index(mysql_url: str) -> None:
    store = store_from_url(mysql_url)
    await store.open()
    await store.migrate()
    await store.close()
    with mysql_connect(mysql_url) as conn, conn.cursor() as cur:
        for state, at in (("available", "- INTERVAL 1 HOUR"), ("scheduled", "+ INTERVAL 1 DAY")):
            cur.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, run_at,"
                " max_attempts, errors, created_at) SELECT CONCAT('q', seq % 20),"
                f" CONCAT('k', seq % 100), '{state}', '{{}}', '{{}}', '{{}}',"
                f" UTC_TIMESTAMP(6) {at}, 3, '[]', UTC_TIMESTAMP(6) FROM seq_1_to_{JOBS}")
        # queue q3's older part claimed and finished, as a drain leaves it
        cur.execute("UPDATE kiln_jobs SET state = 'completed' WHERE queue = 'q3'"
                    f" AND state = 'available' AND id <= {JOBS * 7 // 10}")
        cur.execute("ANALYZE TABLE kiln_jobs")
        kinds = [f"k{k}" for k in range(100) if k % QUEUES == 3]
        select = next(claim("q3", kinds, 100, "s1", probe=False)).stmts[0]
        cur.execute(f"EXPLAIN {select.sql}", select.params)
        plan = cur.fetchall()
    jobs = [r for r in plan if r[2] == "kiln_jobs"]
    assert len(jobs) == 1 and jobs[0][5] == "kiln_jobs_claim", plan
