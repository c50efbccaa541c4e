"""What the PostgreSQL results statement costs as jobs run between vacuums, with its
parameters hidden from the planner (kiln's statement) and visible to it (as before
2026-12-06), side by side.

Not a user benchmark (``bench_drain`` is): a measurement of one statement. A fresh
database gets ``--jobs`` jobs plus a few thousand, statistics are taken while none runs
(as autovacuum's ANALYZE of a table whose jobs wait would), then the ``--jobs`` jobs
run and complete 500 at a time with autovacuum off, leaving their dead entries in
the indexes as a busy table has them between two vacuums. Then batches of 40
completions go through each statement in turn (prepared, as the store runs it).
Prints one JSON line: the median milliseconds a batch, and how often PostgreSQL
planned each statement anew (custom plans) or ran its generic plan.

    python bench/results_plan_cost.py --jobs 100000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

import kiln
from bench.bench_drain import drop_database, fresh_database
from kiln.stores.postgres._jobs import RESULTS_APPLY

BATCH = 40
ROUNDS = 30


def visible(sql: str) -> str:
    """The statement as it was: the arrays unnested directly and 'running' and the
    dependents flag compared as parameters, values the planner sees."""
    swaps = [
        (sql[sql.index("WITH r AS (") : sql.index(" AS r(id, server_id")],
         "WITH r AS (SELECT * FROM unnest(%b::bigint[], %b::text[], %b::int[], %b::text[],"
         " %b::int[], %b::float8[], %b::text[], %b::int[], %b::bool[])"),
        ("j.state = r.running", "j.state = %b::text"),
        ("(r.deps OR", "(%b::bool OR"),
    ]
    for old, new in swaps:
        assert old in sql, f"the results statement changed: {old!r} not found"
        sql = sql.replace(old, new)
    return sql


async def migrate(url: str) -> None:
    app = kiln.App(url)
    await app.amigrate()
    await app.aclose()
    app.close()


def measure(url: str, jobs: int) -> dict[str, object]:
    statements = {"hidden (kiln)": RESULTS_APPLY, "visible (before)": visible(RESULTS_APPLY)}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER TABLE kiln_jobs SET (autovacuum_enabled = false)")
        conn.execute("INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                      " SELECT 'default', 'k', 'available', '{}', now(), 25"
                      " FROM generate_series(1, %s)",
                      (jobs + 2 * BATCH * ROUNDS,))
        conn.execute("ANALYZE kiln_jobs")
        for first in range(1, jobs + 1, 500):
            conn.execute("UPDATE kiln_jobs SET state = 'running', server_id = 's1', attempt = 1"
                         " WHERE id BETWEEN %s AND %s", (first, first + 499))
            conn.execute("UPDATE kiln_jobs SET state = 'completed', server_id = NULL"
                         " WHERE id BETWEEN %s AND %s", (first, first + 499))
        times: dict[str, list[float]] = {name: [] for name in statements}
        next_id = jobs + 1
        for _round in range(ROUNDS):
            for name, sql in statements.items():
                ids = list(range(next_id, next_id + BATCH))
                next_id += BATCH
                conn.execute("UPDATE kiln_jobs SET state = 'running', server_id = 's1',"
                             " attempt = 1 WHERE id = ANY(%s)", (ids,))
                n = len(ids)
                params = (ids, ["s1"] * n, [1] * n, ["completed"] * n, [0] * n, [0.0] * n,
                          [None] * n, [0] * n, [False] * n, [None] * n, "running", False)
                began = time.perf_counter()
                done = conn.execute(sql, params, prepare=True).fetchall()
                times[name].append((time.perf_counter() - began) * 1000)
                assert len(done) == n, (name, len(done))
        plans = {str(s): {"generic": g, "custom": c} for s, g, c in conn.execute(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'WITH r AS%%'").fetchall()}
    return {
        "jobs_run_since_vacuum": jobs, "batch": BATCH,
        "ms_per_batch_median": {name: round(statistics.median(t[5:]), 3)
                                for name, t in times.items()},
        "plans": {name: next(v for s, v in plans.items() if s.startswith(sql[:25]))
                  for name, sql in statements.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000,
                        help="jobs run and completed since the last vacuum")
    args = parser.parse_args()
    url = fresh_database("kiln_bench_results_plan")
    try:
        asyncio.run(migrate(url))
        print(json.dumps(measure(url, args.jobs)))
    finally:
        drop_database(url)


if __name__ == "__main__":
    main()
