"""Concurrency-limit benchmark: the cost of a global limit that never binds on drain.

The same drain (N no-op jobs, one worker process; PostgreSQL by default, ``--mysql`` or
``--sqlite``) three ways, interleaved in one run: no limit; a per-tenant
``kiln.Concurrency(max=1000, key="args.t")`` on the kind (ten tenants, so every claim
goes through the limited claim and no key is ever full); a queue limit of 1000. Prints
one JSON object per drain, then the medians of the per-run ratios (limited / plain jobs
per second, and database CPU per job; SQLite runs inside the worker, so its CPU is the
worker's). The goal (issue 15): a limit that never binds costs <= 10%.

Once filled, the table is analyzed (ANALYZE kiln_jobs), as autovacuum would have by then
in production: PostgreSQL's plans differ with statistics, and a table without them
(this machine's PostgreSQL runs with autovacuum off) hid a limited claim that scanned
the table (bench/RESULTS.md, "Global concurrency limits"). ``--no-analyze`` measures
without them.

    python -m bench.bench_concurrency --jobs 10000 --concurrency 10 --runs 5 [--mysql | --sqlite]
    python -m bench.bench_concurrency --stores postgresql,sqlite,mariadb  # all in one run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.bench_drain import (
    PgProbe,
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
    measure,
    my_execute,
    pg_execute,
)
from bench.drain_concurrency import app_for

MODES = ("plain", "kind", "queue")
TENANTS = 10


def fill(url: str, mode: str, jobs: int) -> None:
    app = app_for(url, mode)
    try:
        app.migrate()
        for start in range(0, jobs, 1000):
            app.enqueue_many([("noop", {"n": i, "t": i % TENANTS})
                              for i in range(start, min(start + 1000, jobs))])
    finally:
        app.close()


def run(mode: str, jobs: int, concurrency: int, store: str, analyze: bool = True
        ) -> dict[str, Any]:
    """One drain of ``mode`` on a fresh database of ``store``: postgresql, mariadb or
    sqlite."""
    if store == "sqlite":
        with tempfile.TemporaryDirectory() as tmp:
            return _drain(mode, jobs, concurrency, store, f"sqlite:///{Path(tmp) / 'conc.db'}",
                          analyze)
    url = fresh_mysql_database("kiln_conc") if store == "mariadb" else fresh_database(
        "kiln_conc")
    try:
        return _drain(mode, jobs, concurrency, store, url, analyze)
    finally:
        (drop_mysql_database if store == "mariadb" else drop_database)(url)


def _drain(mode: str, jobs: int, concurrency: int, store: str, url: str, analyze: bool
           ) -> dict[str, Any]:
    fill(url, mode, jobs)
    cmd = [sys.executable, "-m", "bench.drain_concurrency", url, str(concurrency), mode]
    if store == "sqlite":  # the database runs in the worker: its CPU is the worker's
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            if analyze:
                conn.execute("ANALYZE")

            def left() -> int:
                return int(conn.execute(
                    "SELECT count(*) FROM kiln_jobs WHERE state <> 'completed'").fetchone()[0])

            return measure(mode, cmd, left, jobs, None, poll=0.05)
    if analyze:
        (my_execute if store == "mariadb" else pg_execute)(
            "ANALYZE TABLE kiln_jobs" if store == "mariadb" else "ANALYZE kiln_jobs", url)
    if store == "mariadb":
        unfinished = "SELECT count(*) FROM kiln_jobs WHERE state <> 'completed'"
        return measure(mode, cmd, lambda: int(my_execute(unfinished, url)[0][0]), jobs,
                       "mariadbd", poll=0.05)
    probe = PgProbe(url, "SELECT (EXISTS (SELECT 1 FROM kiln_jobs WHERE state ="
                    " 'available'))::int + (EXISTS (SELECT 1 FROM kiln_jobs"
                    " WHERE state = 'running'))::int")
    try:
        return measure(mode, cmd, probe.remaining, jobs, "postgres", probe_cpu=probe.cpu)
    finally:
        probe.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    backend = parser.add_mutually_exclusive_group()
    backend.add_argument("--mysql", action="store_true")
    backend.add_argument("--sqlite", action="store_true",
                       help="a fresh SQLite file per drain (its CPU is the worker's)")
    parser.add_argument("--no-analyze", dest="analyze", action="store_false",
                        help="drain a table without statistics (no ANALYZE after the fill)")
    parser.add_argument("--stores", default=None,
                        help="comma-separated, in one run: postgresql,sqlite,mariadb")
    args = parser.parse_args()
    stores = (args.stores.split(",") if args.stores else
              ["mariadb" if args.mysql else "sqlite" if args.sqlite else "postgresql"])
    summaries = [measure_store(store, args) for store in stores]
    if len(summaries) > 1:  # the stores side by side, as measured in this one run
        print(json.dumps({s["database"]: {"throughput_ratio_median": s["throughput_ratio_median"],
                                          "load_1m": s["load_1m"]} for s in summaries},
                         indent=2))


def measure_store(store: str, args: argparse.Namespace) -> dict[str, Any]:
    """The runs of one store, each the three modes interleaved; its summary, printed."""
    ratios: dict[str, list[float]] = {m: [] for m in MODES[1:]}
    cpu: dict[str, list[float]] = {m: [] for m in MODES[1:]}
    load = [os.getloadavg()[0]]
    for n in range(args.runs):
        order = MODES if n % 2 == 0 else (MODES[0], *reversed(MODES[1:]))
        results = {}
        for mode in order:  # interleaved: drift hits every mode of a run alike
            results[mode] = run(mode, args.jobs, args.concurrency, store, args.analyze)
            print(json.dumps({"run": n, "database": store, **results[mode]}), flush=True)
        base = results["plain"]
        for mode in MODES[1:]:
            ratios[mode].append(results[mode]["jobs_per_s"] / base["jobs_per_s"])
            if base["db_cpu_s_per_1000"]:
                cpu[mode].append(results[mode]["db_cpu_s_per_1000"] / base["db_cpu_s_per_1000"])
        load.append(os.getloadavg()[0])
    summary = {
        "database": store,
        "jobs": args.jobs, "concurrency": args.concurrency, "runs": args.runs,
        "analyzed": args.analyze,
        "load_1m": [round(x, 2) for x in load],
        "throughput_ratio_median": {m: round(statistics.median(r), 3) for m, r in ratios.items()},
        "throughput_ratios": {m: [round(x, 3) for x in r] for m, r in ratios.items()},
        "db_cpu_ratio_median": {m: round(statistics.median(r), 3) for m, r in cpu.items() if r},
    }
    print(json.dumps(summary, indent=2), flush=True)
    return summary


if __name__ == "__main__":
    main()
