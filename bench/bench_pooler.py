"""Drain through PgBouncer in transaction mode against direct connections, in one run
(issue 41: the goal is at least 80% of direct).

Each case fills a fresh database with ``--jobs`` no-op jobs, starts ``--procs`` worker
processes (one kiln server each, concurrency ``--concurrency``, ``max_conns``
``--max-conns``: the fleet's setting), waits for every one to print READY, then starts
them together; the clock runs until a direct probe (every 10 ms) sees no job left.
Cases, interleaved round by round so drift on a shared machine hits them alike:

- ``direct``: the workers connect to PostgreSQL (LISTEN on their own connection);
- ``pgbouncer``: through a PgBouncer of the run's own in transaction mode
  (``default_pool_size`` ``--pool-size``; ``?pooler=transaction``: nothing prepared),
  no LISTEN (the servers poll; a backlog is claimed back to back anyway);
- ``pgbouncer+listen``: the same with ``listen_url`` on a direct connection.

Reports jobs/s, the workers', PostgreSQL's and PgBouncer's CPU seconds per 1,000 jobs
(from /proc; anything else the database serves meanwhile counts too: state the load),
one JSON line per case and round, then a summary of medians with each pooled case's
share of direct (the median of the per-round ratios).

    python -m bench.bench_pooler --jobs 20000 --rounds 3 [--procs 4 --pool-size 4]
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
from bench.bench_drain import ROOT, PgProbe, drop_database, fresh_database
from bench.bench_workers import LEFT_PG, fill

CASES = ("direct", "pgbouncer", "pgbouncer+listen")


async def work(url: str, concurrency: int, max_conns: int, listen_url: str | None) -> None:
    """One worker process: READY once connected, runs from a line on stdin."""
    import kiln

    options: dict[str, Any] = {"listen_url": listen_url} if listen_url else {}
    app = kiln.App(url, max_conns=max_conns, **options)

    @app.job("noop")
    async def noop(job: kiln.Job) -> None:
        return None

    server = app.server({"default": concurrency})
    await app.client().now()  # connected before the clock starts
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await server.run()


def drain(url: str, probe_url: str, args: argparse.Namespace,
          listen_url: str | None) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.bench_pooler", "--worker", url,
           str(args.concurrency), str(args.max_conns), listen_url or ""]
    workers = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd=ROOT, env=dict(os.environ))
               for _ in range(args.procs)]
    probe = PgProbe(probe_url, LEFT_PG)
    try:
        for w in workers:
            assert w.stdout is not None
            line = w.stdout.readline()
            if not line.startswith("READY"):
                raise RuntimeError(f"a worker failed to start: {line!r}")
        db_before, bouncer_before = _procs.snapshot("postgres"), _procs.snapshot("pgbouncer")
        probe_before = probe.cpu()
        workers_before = sum(_procs.cpu_seconds(w.pid) for w in workers)
        began = time.perf_counter()
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        while probe.remaining() > 0:
            if time.perf_counter() - began > args.timeout:
                raise RuntimeError(f"the workers did not drain within {args.timeout}s")
            time.sleep(0.01)
        elapsed = time.perf_counter() - began
        workers_cpu = sum(_procs.cpu_seconds(w.pid) for w in workers) - workers_before
        db_cpu = _procs.delta(db_before, _procs.snapshot("postgres")) - (
            probe.cpu() - probe_before)
        bouncer_cpu = _procs.delta(bouncer_before, _procs.snapshot("pgbouncer"))
    finally:
        for w in workers:
            w.kill()
            w.wait()
        probe.close()
    per = 1000 / args.jobs
    return {"seconds": round(elapsed, 3), "jobs_per_s": round(args.jobs / elapsed, 1),
            "worker_cpu_s_per_1000": round(workers_cpu * per, 4),
            "db_cpu_s_per_1000": round(db_cpu * per, 4),
            "pgbouncer_cpu_s_per_1000": round(bouncer_cpu * per, 4)}


def run_case(case: str, args: argparse.Namespace, bouncer: Any) -> dict[str, Any]:
    direct = fresh_database("kiln_pooler")
    try:
        asyncio.run(fill(direct, args.jobs))
        database = direct.rsplit("/", 1)[1]
        if case == "direct":
            row = drain(direct, direct, args, None)
        else:
            url = bouncer.url(database, pooler="transaction")
            row = drain(url, direct, args, direct if case == "pgbouncer+listen" else None)
    finally:
        drop_database(direct)
    return {"bench": "pooler", "case": case, "procs": args.procs,
            "concurrency": args.concurrency, "max_conns": args.max_conns,
            "pool_size": args.pool_size, "jobs": args.jobs, **row}


def summarize(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    keys = ("jobs_per_s", "worker_cpu_s_per_1000", "db_cpu_s_per_1000",
            "pgbouncer_cpu_s_per_1000")
    summary: dict[str, Any] = {
        case: {k: round(statistics.median(r[k] for r in rows), 4) for k in keys}
        for case, rows in results.items()
    }
    for case in CASES[1:]:
        if case in results and "direct" in results:
            summary[case]["share_of_direct"] = round(statistics.median(
                p["jobs_per_s"] / d["jobs_per_s"]
                for p, d in zip(results[case], results["direct"], strict=True)), 3)
    return summary


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, concurrency, max_conns, listen = sys.argv[2:6]
        asyncio.run(work(url, int(concurrency), int(max_conns), listen or None))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--procs", type=int, default=4, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=10, help="per worker process")
    parser.add_argument("--max-conns", type=int, default=2, help="each worker's pool")
    parser.add_argument("--pool-size", type=int, default=4, help="PgBouncer's per database")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args()
    cases = args.cases.split(",")
    if any(c not in CASES for c in cases):
        parser.error(f"--cases: some of {','.join(CASES)}")
    from tests.plugins.pgbouncer import PgBouncer  # the suite's launcher (Debian's binary)

    bouncer = PgBouncer(pool_size=args.pool_size)
    bouncer.start()
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for _ in range(args.rounds):
            for case in cases:
                row = run_case(case, args, bouncer)
                results.setdefault(case, []).append(row)
                print(json.dumps(row), flush=True)
    finally:
        bouncer.stop()
    print(json.dumps({"bench": "pooler", "summary": summarize(results),
                      "rounds": args.rounds, "jobs": args.jobs, "procs": args.procs,
                      "max_conns": args.max_conns, "pool_size": args.pool_size}), flush=True)


if __name__ == "__main__":
    main()
