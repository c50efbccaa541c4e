"""Many workers: drain N no-op jobs with 1, 2, 4 and 8 worker processes, PostgreSQL and MariaDB.

Each worker process is bench.drain_kiln (one kiln server, queue "default", concurrency
``--concurrency``, 10 by default). All of a run's processes connect and print READY
before any starts; the clock runs from the go line to the moment the harness sees no
job left (polling every 10 ms on PostgreSQL, 50 ms on MariaDB, as bench.bench_drain
does). Reports jobs/s, the workers' CPU seconds per 1,000 jobs (all processes summed)
and the database's CPU seconds per 1,000 jobs (every postgres or mariadbd process, from
/proc, so anything else the database serves meanwhile counts too; record the load).
Runs are interleaved (for each run: each database, each process count) so that drift
hits every case alike. Prints one JSON object per case and run, then a summary of
medians with each count's speedup over one process and MariaDB's share of PostgreSQL.

    python -m bench.bench_workers --jobs 20000 --runs 3 [--procs 1,2,4,8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

from bench import _procs
from bench.bench_drain import (
    ROOT,
    PgProbe,
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
    my_execute,
)

LEFT_PG = (  # 0 once drained; two index probes, so that polling costs little
    "SELECT (EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'available'))::int"
    " + (EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'running'))::int"
)
LEFT_MY = "SELECT count(*) FROM kiln_jobs WHERE state <> 'completed'"


async def fill(url: str, jobs: int) -> None:
    import kiln
    from kiln.stores import store_from_url

    store = store_from_url(url)
    await store.open()
    try:
        await store.migrate()
        client = kiln.Client(store)
        for start in range(0, jobs, 1000):
            await client.enqueue_many(
                [client.build("noop", {"n": i}) for i in range(start, min(start + 1000, jobs))]
            )
    finally:
        await store.close()


def drain(url: str, procs: int, concurrency: int, jobs: int, mysql: bool,
          timeout: float = 600.0) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.drain_kiln", url, str(concurrency)]
    workers = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=ROOT, env=dict(os.environ)) for _ in range(procs)]
    probe = None if mysql else PgProbe(url, LEFT_PG)
    try:
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"a worker failed to start: {line!r}")
        remaining = (lambda: int(my_execute(LEFT_MY, url)[0][0])) if probe is None \
            else probe.remaining
        poll = 0.05 if mysql else 0.01
        db_name = "mariadbd" if mysql else "postgres"
        db_before = _procs.snapshot(db_name)
        probe_before = probe.cpu() if probe else 0.0
        workers_before = sum(_procs.cpu_seconds(w.pid) for w in workers)
        began = time.perf_counter()
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        while remaining() > 0:
            if time.perf_counter() - began > timeout:
                raise RuntimeError(f"{procs} workers did not drain within {timeout}s")
            time.sleep(poll)
        elapsed = time.perf_counter() - began
        workers_cpu = sum(_procs.cpu_seconds(w.pid) for w in workers) - workers_before
        db_cpu = _procs.delta(db_before, _procs.snapshot(db_name)) - (
            (probe.cpu() - probe_before) if probe else 0.0)
    finally:
        for w in workers:
            w.kill()
            w.wait()
        if probe is not None:
            probe.close()
    return {
        "database": "mariadb" if mysql else "postgresql",
        "procs": procs,
        "concurrency": concurrency,
        "jobs": jobs,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(jobs / elapsed, 1),
        "worker_cpu_s_per_1000": round(workers_cpu / jobs * 1000, 4),
        "db_cpu_s_per_1000": round(db_cpu / jobs * 1000, 4),
    }


def run_case(database: str, procs: int, concurrency: int, jobs: int) -> dict[str, Any]:
    mysql = database == "mariadb"
    url = fresh_mysql_database("kiln_workers") if mysql else fresh_database("kiln_workers")
    try:
        asyncio.run(fill(url, jobs))
        return drain(url, procs, concurrency, jobs, mysql)
    finally:
        (drop_mysql_database if mysql else drop_database)(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10, help="per worker process")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--procs", default="1,2,4,8", help="worker process counts")
    parser.add_argument("--databases", default="postgresql,mariadb")
    args = parser.parse_args()
    counts = [int(n) for n in args.procs.split(",")]
    databases = args.databases.split(",")
    for d in databases:
        if d not in ("postgresql", "mariadb"):
            parser.error(f"unknown database {d!r}: postgresql or mariadb")
    if any(n < 1 for n in counts) or args.jobs < 1 or args.concurrency < 1:
        parser.error("--procs, --jobs and --concurrency must be at least 1")
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for _ in range(args.runs):
        for database in databases:
            for n in counts:
                row = run_case(database, n, args.concurrency, args.jobs)
                results.setdefault((database, n), []).append(row)
                print(json.dumps(row), flush=True)
    summary: dict[str, Any] = {}
    for (database, n), rows in results.items():
        med = {k: round(statistics.median(r[k] for r in rows), 4)
               for k in ("jobs_per_s", "worker_cpu_s_per_1000", "db_cpu_s_per_1000")}
        summary.setdefault(database, {})[str(n)] = med
    for by_n in summary.values():
        one = by_n.get(str(counts[0]), {}).get("jobs_per_s")
        for med in by_n.values():
            med[f"speedup_vs_{counts[0]}"] = round(med["jobs_per_s"] / one, 2) if one else None
    if "postgresql" in summary and "mariadb" in summary:
        summary["mariadb_share_of_postgresql"] = {  # median of the per-run ratios
            str(n): round(statistics.median(
                m["jobs_per_s"] / p["jobs_per_s"]
                for m, p in zip(results[("mariadb", n)], results[("postgresql", n)],
                                strict=True)), 3)
            for n in counts
        }
    print(json.dumps({"summary": summary, "runs": args.runs, "jobs": args.jobs,
                      "concurrency": args.concurrency}, indent=2))


if __name__ == "__main__":
    main()
