"""EXPLAIN (ANALYZE, BUFFERS) of kiln's claim and results statements beside N finished jobs.

A fresh PostgreSQL database, migrated; N finished jobs written by SQL (90% completed,
10% failed, finished 2 to 22 hours ago), VACUUM ANALYZE; then 20,000 jobs enqueued
through the client, claimed 50 at a time and completed 40 at a time with the store's own
prepared statements (past PostgreSQL's five custom plans, so the plans shown are the
ones a worker keeps). Prints both plans, and each statement's generic and custom plan
counts. Compare ``N`` = 1,000,000 with a small ``N``: the plans should be the same, and
the pages they touch about the same.

    python -m bench.plans_beside_history 1000000
"""

from __future__ import annotations

import asyncio
import sys

import psycopg

import kiln
from bench.bench_drain import drop_database, fresh_database
from bench.drain_history import ARGS
from kiln.stores.postgres import _jobs

ARRAYS = ("bigint[]", "text[]", "int[]", "text[]", "int[]", "float8[]", "text[]", "int[]",
          "bool[]", "timestamptz[]", "text", "bool")


async def _migrate(url: str) -> None:
    app = kiln.App(url)
    await app.amigrate()
    await app.aclose()


async def _enqueue(url: str, jobs: int) -> None:
    app = kiln.App(url)
    client = app.client()
    for start in range(0, jobs, 1000):
        await client.enqueue_many([client.build("noop", {"n": i})
                                   for i in range(start, min(start + 1000, jobs))])
    await app.aclose()


def main(history: int) -> None:
    url = fresh_database("kiln_plans")
    try:
        asyncio.run(_migrate(url))
        with psycopg.connect(url, autocommit=True) as conn:
            for lo in range(1, history + 1, 200_000):
                ago = "now() - interval '2 hours' - (g %% 72000) * interval '1s'"
                conn.execute(
                    "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
                    " created_at, attempt, attempted_at, finished_at)"
                    " SELECT 'default', 'scale.work', CASE WHEN g %% 10 = 0 THEN 'failed'"
                    f" ELSE 'completed' END, %s::jsonb, {ago}, 3, {ago},"
                    f" CASE WHEN g %% 10 = 0 THEN 3 ELSE 1 END, {ago},"
                    f" {ago} + interval '40 ms' FROM generate_series(%s::bigint, %s::bigint) g",
                    (ARGS, lo, min(lo + 199_999, history)))
            conn.execute("VACUUM ANALYZE kiln_jobs")
        asyncio.run(_enqueue(url, 20_000))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(_jobs.CLAIM_PREPARE)
            claim = f"EXECUTE {_jobs.CLAIM_PREPARED} ('bench-s1', 'default', ARRAY['noop'], 50, 50)"
            for _ in range(8):
                conn.execute(claim)
            print("== a claim of 50 (its 9th execution)")
            print("\n".join(r[0] for r in conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) {claim}")))
            conn.execute(f"PREPARE kiln_results AS"
                         f" {_jobs._numbered(_jobs.RESULTS_APPLY.replace('%b', '%s'))}")
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM kiln_jobs WHERE state = 'running' ORDER BY id")]
            batches = [ids[i:i + 40] for i in range(0, len(ids), 40)]
            execute = "EXECUTE kiln_results (" + ", ".join(f"%s::{t}" for t in ARRAYS) + ")"
            cur = psycopg.ClientCursor(conn)  # EXECUTE takes no bound parameters
            for n, batch in enumerate(batches, 1):
                size = len(batch)
                args = (batch, ["bench-s1"] * size, [1] * size, ["completed"] * size,
                        [0] * size, [0.0] * size, [None] * size, [0] * size,
                        [False] * size, [None] * size, "running", False)
                if n < len(batches):
                    cur.execute(execute, args)
                    continue
                cur.execute("EXPLAIN (ANALYZE, BUFFERS) " + execute, args)
                print(f"== a results batch of {size} (execution {n})")
                print("\n".join(r[0] for r in cur.fetchall()))
            print("== name, generic plans, custom plans:", conn.execute(
                "SELECT name, generic_plans, custom_plans FROM pg_prepared_statements"
                " WHERE name LIKE 'kiln_%'").fetchall())
    finally:
        drop_database(url)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
