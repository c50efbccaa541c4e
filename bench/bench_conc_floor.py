"""The floor of a PostgreSQL claim of keyed jobs (issue 40, item 4): measurement only.

Times, interleaved claim by claim, the plain claim, the limited claim, and statements
that take keyed jobs with nothing that makes a limit safe (no key lock, count, recheck
or key-row write; never for use): ``walk`` reads ``--limit`` jobs of every key as a
LATERAL per key row, ``walkcap`` ceil(limit / keys) of each (what the limited claim's
first round reads), ``shape`` is the plain claim's own statement over keyed jobs (one
walk per kind, along an extra index on (queue, kind, priority, run_at, id) of the keyed
available jobs), ``shape_noidx`` the same on a database without kiln_jobs_conc_running.
Each variant claims ``--limit`` jobs and completes the batch it claimed the round
before. A database per variant, all the same size, filled as bench_concurrency fills
them (ten tenants). Prints one JSON object: median claim in ms, plain / variant.

    python -m bench.bench_conc_floor --limit 50 --rounds 150 --jobs 10000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import psycopg

from bench.bench_concurrency import TENANTS, fill
from bench.bench_drain import drop_database, fresh_database, pg_execute
from kiln.stores.postgres import _concurrency, _jobs

SET = "state = 'running', attempt = attempt + 1, attempted_at = now(), server_id = 'bench'"
WALK = (
    f"UPDATE kiln_jobs SET {SET} WHERE id = ANY(ARRAY(SELECT c.id FROM kiln_concurrency_keys k"
    " CROSS JOIN LATERAL (SELECT id, priority, run_at FROM kiln_jobs j"
    " WHERE j.conc_key = k.conc_key AND j.state = 'available' AND j.queue = %s"
    " AND j.kind = ANY(%s::text[]) ORDER BY priority, run_at, id LIMIT {per}) c"
    f" ORDER BY c.priority, c.run_at, c.id LIMIT %s)) RETURNING {_jobs.CLAIM_COLS}"
)
SHAPE = (
    f"UPDATE kiln_jobs SET {SET} WHERE id = ANY(ARRAY(SELECT c.id FROM"
    " (SELECT DISTINCT unnest(%s::text[]) AS kind) k CROSS JOIN LATERAL (SELECT id, priority,"
    " run_at FROM kiln_jobs WHERE state = 'available' AND conc_key IS NOT NULL AND queue = %s"
    " AND kind = k.kind ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED) c"
    f" ORDER BY c.priority, c.run_at, c.id LIMIT %s)) RETURNING {_jobs.CLAIM_COLS}"
)
SHAPE_INDEX = (
    "CREATE INDEX bench_shape ON kiln_jobs (queue, kind, priority, run_at, id)"
    " WHERE state = 'available' AND conc_key IS NOT NULL"
)
DONE = (
    "UPDATE kiln_jobs SET state = 'completed', finished_at = now(), server_id = NULL"
    " WHERE id = ANY(%s::bigint[])"
)


def variants(n: int) -> dict[str, tuple[str, str, tuple[Any, ...]]]:
    """name -> (database, statement, parameters)."""
    p = {"qkey": "queue:default", "q": "default", "kinds": ["noop"], "limit": n,
         "server": "bench"}
    cap = -(-n // TENANTS)
    return {
        "plain": ("plain", _jobs.CLAIM, ("bench", "default", ["noop"], n, n)),
        "limited": ("kind", _concurrency.CLAIM_SQL,
                    tuple(p[k] for k in _concurrency.CLAIM_NAMES)),
        "walk": ("kind", WALK.format(per=n), ("default", ["noop"], n)),
        "walkcap": ("kind", WALK.format(per=cap), ("default", ["noop"], n)),
        "shape": ("kind", SHAPE, (["noop"], "default", n, n)),
        "shape_noidx": ("noidx", SHAPE, (["noop"], "default", n, n)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=150)
    parser.add_argument("--jobs", type=int, default=10_000,
                        help="per variant's database (more than rounds x limit)")
    args = parser.parse_args()
    chosen = variants(args.limit)
    urls: dict[str, str] = {}
    conns: dict[str, psycopg.Connection[Any]] = {}
    try:
        for name, (db, _sql, _params) in chosen.items():  # a database each
            urls[name] = url = fresh_database("kiln_floor")
            fill(url, "plain" if db == "plain" else "kind", args.jobs)
            if db != "plain":
                pg_execute(SHAPE_INDEX, url)
            if db == "noidx":
                pg_execute("DROP INDEX kiln_jobs_conc_running", url)
            pg_execute("ANALYZE kiln_jobs", url)
            conns[name] = psycopg.connect(url, autocommit=True)
        names = list(chosen)
        times: dict[str, list[float]] = {v: [] for v in names}
        held: dict[str, list[int]] = {v: [] for v in names}
        load = [os.getloadavg()[0]]
        for r in range(args.rounds):
            for v in names[r % len(names):] + names[:r % len(names)]:
                _db, sql, params = chosen[v]
                conn = conns[v]
                began = time.perf_counter()
                rows = conn.execute(sql, params, prepare=True).fetchall()
                times[v].append(time.perf_counter() - began)
                if held[v]:
                    conn.execute(DONE, (held[v],), prepare=True)
                held[v] = [int(row[0]) for row in rows]
        load.append(os.getloadavg()[0])
        med = {v: statistics.median(t) * 1000 for v, t in times.items()}
        print(json.dumps({
            "database": "postgresql", "limit": args.limit, "rounds": args.rounds,
            "jobs": args.jobs, "tenants": TENANTS, "load_1m": [round(x, 2) for x in load],
            "median_claim_ms": {v: round(x, 3) for v, x in med.items()},
            "ratio_plain_over": {v: round(med["plain"] / x, 3) for v, x in med.items()},
        }), flush=True)
    finally:
        for conn in conns.values():
            conn.close()
        for url in urls.values():
            drop_database(url)


if __name__ == "__main__":
    main()
