"""Unique inserts beside plain ones on PostgreSQL or SQLite, in CPU time, not wall time.

The same work as ``bench_unique``'s ``api`` way (enqueue-many of 20,000 jobs in batches
of 1,000, each unique by an argument or plain, rounds alternating, every unique key
new), measured as the CPU time it costs: this process's (building the jobs, keys,
parameters, results) and the database server's (the backends of the bench's fresh
database, read from /proc: run it on the database's machine; SQLite's is in this
process). On a loaded machine wall
time mostly measures the neighbours; CPU time is what a unique insert costs. Prints
one JSON object per kind (ms per batch of 1,000, medians) and the median of the
per-round ratios, unique / plain, of the total.

    python bench/bench_unique_cpu.py [--url postgresql://postgres@127.0.0.1:5432/test]
    python bench/bench_unique_cpu.py --url sqlite:///tmp/unique.db
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: python bench/bench_unique_cpu.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg

import kiln
from bench.bench_enqueue import drop, fresh
from bench.bench_unique import BATCH, JOBS, UNIQUE, items

NAME = "kiln_bench_unique_cpu"
TICK = os.sysconf("SC_CLK_TCK")


def backend_cpu(monitor: psycopg.Connection[tuple[int]] | None) -> float:
    """CPU seconds (user + system) of the bench database's backends (none: SQLite)."""
    total = 0.0
    if monitor is None:
        return total
    for (pid,) in monitor.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s", (NAME,)
    ).fetchall():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


async def main(url: str, monitor: psycopg.Connection[tuple[int]] | None, rounds: int) -> None:
    app = kiln.App(url)
    app.register("bench.u", lambda job: None, queue="bench", unique=UNIQUE)
    app.register("bench.p", lambda job: None, queue="bench")
    await app.amigrate()
    await app.aenqueue_many(items(-1, True)[0])  # warm-up: connections, plans
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "unique": []}
    for r in range(rounds):
        for kind in ("plain", "unique"):
            server, client = backend_cpu(monitor), time.process_time()
            for batch in items(r, kind == "unique"):
                await app.aenqueue_many(batch)
            runs[kind].append((time.process_time() - client, backend_cpu(monitor) - server))
    await app.aclose()
    per_batch = 1000 * BATCH / JOBS  # seconds per round -> ms per batch
    for kind, values in runs.items():
        print(json.dumps({
            "insert": kind, "client_ms_per_batch": round(statistics.median(
                v[0] for v in values) * per_batch, 2),
            "server_ms_per_batch": round(statistics.median(v[1] for v in values) * per_batch, 2),
            "jobs": JOBS, "batch": BATCH}))
    ratios = [sum(u) / sum(p) for p, u in zip(runs["plain"], runs["unique"], strict=True)]
    print(json.dumps({"ratio_unique_to_plain_cpu": round(statistics.median(ratios), 2),
                      "per_run": [round(x, 2) for x in ratios]}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="a PostgreSQL server on this machine (a fresh database is"
                        " made beside the one named) or an SQLite file (made in a temporary"
                        " folder)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = fresh(args.url, NAME, Path(tmp))
        monitor = None if db.startswith("sqlite") else psycopg.connect(args.url, autocommit=True)
        try:
            asyncio.run(main(db, monitor, args.rounds))
        finally:
            if monitor is not None:
                monitor.close()
            drop(db)
