"""MySQL/MariaDB: the limited claim probes each key's jobs, it does not scan the table.

20,000 available jobs of ten concurrency keys, 40 running, the table analyzed (as
InnoDB's persistent statistics are in production). EXPLAIN of the store's own
statement that locks the keys (_concurrency._lock_stmts): the probe for an available
job of each key goes through an index, never a full scan of kiln_jobs (as EXISTS,
MariaDB materialized it as a semi-join that read every row at every claim), and the
claim still takes jobs of every key.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kiln.stores import Store, store_from_url
from kiln.stores.mysql._concurrency import _lock_stmts
from tests.plugins.databases import mysql_connect

JOBS = 20_000
KEYS = 10


async def test_the_key_probe_uses_an_index(mysql_url: str) -> None:
    store = store_from_url(mysql_url)
    await store.open()
    await store.migrate()
    try:
        await check_the_key_probe(mysql_url, store)
    finally:
        await store.close()


async def check_the_key_probe(url: str, store: Store) -> None:
    start = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    rows = [("q", "k", "running" if i < 40 else "available", "{}", "{}", "{}",
             start + timedelta(milliseconds=i), 25, "[]", start, f"kind:k|{i % KEYS}")
            for i in range(JOBS)]
    with mysql_connect(url) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, run_at,"
            " max_attempts, errors, created_at, conc_key)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
        cur.executemany("INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES (%s, 1000)",
                        [(f"kind:k|{k}",) for k in range(KEYS)])
        cur.execute("ANALYZE TABLE kiln_jobs")
        lock = _lock_stmts("q", ["k"], 50, True)[-1]
        cur.execute(f"EXPLAIN {lock.sql}", lock.params)
        plan = cur.fetchall()
    full_scans = [r for r in plan if r[2] in ("j", "r", "kiln_jobs") and r[3] == "ALL"]
    assert not full_scans, plan
    assert not [r for r in plan if r[1] == "MATERIALIZED"], plan
    claimed = await store.job_claim("q", ["k"], 50, "s1", limited=True)
    assert len(claimed) == 50
    with mysql_connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT conc_key, count(*) FROM kiln_jobs WHERE server_id = 's1'"
                    " GROUP BY conc_key")
        per_key = dict(cur.fetchall())
    assert per_key == {f"kind:k|{k}": 5 for k in range(KEYS)}  # the first of every key first
