"""The claim alone, limited against plain, interleaved claim by claim (issue 40, item 4).

The drain of bench_concurrency is paced by its claims (the pool waits on a claim nearly
all the time: bench/RESULTS.md, "Global concurrency limits"), but on a shared machine
its runs swing by 2x. This measures what sets that pace, the latency of one claim, with
the three modes side by side in one process: a database per mode, each filled as
bench_concurrency fills it (no limit; a per-tenant ``Concurrency(max=1000,
key="args.t")`` over ten tenants; a queue limit of 1000, claimed by its queue's part
alone as a pool of an unlimited kind does). Then, round after round, each mode claims
``--limit`` jobs (the order rotates every round) and completes the batch it claimed
the round before, so about two batches are running at a claim, as in a drain that
claims ahead. Only the claim is timed. Prints one JSON object per store: the median
claim in ms per mode and the ratio plain / mode (what the drain's ratio would be if
claims were all it waited on).

    python -m bench.bench_conc_claim --stores postgresql,sqlite,mariadb --rounds 150
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_concurrency import TENANTS, fill
from bench.bench_drain import (
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
    my_execute,
    pg_execute,
)
from bench.drain_concurrency import LIMIT
from kiln._model._concurrency import queue_group
from kiln._model._job import JobResult, JobRow, Outcome
from kiln.stores import Store, store_from_url

MODES = ("plain", "kind", "queue")


def _url(store: str, tmp: str, mode: str) -> str:
    if store == "sqlite":
        return f"sqlite:///{Path(tmp) / mode}.db"
    return fresh_mysql_database("kiln_cc") if store == "mariadb" else fresh_database("kiln_cc")


def _analyze(store: str, url: str) -> None:
    if store == "sqlite":
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        conn.execute("ANALYZE")
        conn.close()
    elif store == "mariadb":
        my_execute("ANALYZE TABLE kiln_jobs", url)
    else:
        pg_execute("ANALYZE kiln_jobs", url)


async def _claim(s: Store, mode: str, limit: int) -> list[JobRow]:
    if mode == "plain":
        return await s.job_claim("default", ["noop"], limit, "bench")
    return await s.job_claim("default", ["noop"], limit, "bench", limited=True,
                             keys=mode == "kind")


async def _complete(s: Store, rows: list[JobRow]) -> None:
    if rows:
        await s.job_results_apply([JobResult(
            job_id=r.id, server_id="bench", attempt=r.attempt, outcome=Outcome.COMPLETED,
            claimed_at=r.attempted_at) for r in rows])


async def measure(store: str, jobs: int, limit: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        urls = {m: _url(store, tmp, m) for m in MODES}
        stores: dict[str, Store] = {}
        try:
            for mode, url in urls.items():
                fill(url, mode, jobs)
                s = stores[mode] = store_from_url(url)
                await s.open()
                if mode == "queue":
                    await s.concurrency_declare({queue_group("default"): LIMIT}, None)
                _analyze(store, url)
            times: dict[str, list[float]] = {m: [] for m in MODES}
            held: dict[str, list[JobRow]] = {m: [] for m in MODES}
            load = [os.getloadavg()[0]]
            for n in range(rounds):
                order = MODES[n % 3:] + MODES[:n % 3]
                for mode in order:
                    s = stores[mode]
                    began = time.perf_counter()
                    rows = await _claim(s, mode, limit)
                    took = time.perf_counter() - began
                    if rows:
                        times[mode].append(took)
                    await _complete(s, held[mode])
                    held[mode] = rows
            load.append(os.getloadavg()[0])
            med = {m: statistics.median(t) * 1000 for m, t in times.items() if t}
            return {
                "database": store, "jobs": jobs, "limit": limit, "rounds": rounds,
                "tenants": TENANTS, "load_1m": [round(x, 2) for x in load],
                "claims": {m: len(t) for m, t in times.items()},
                "median_claim_ms": {m: round(v, 3) for m, v in med.items()},
                "ratio_plain_over": {m: round(med["plain"] / med[m], 3)
                                     for m in MODES[1:] if m in med},
            }
        finally:
            for s in stores.values():
                await s.close()
            if store != "sqlite":
                for url in urls.values():
                    (drop_mysql_database if store == "mariadb" else drop_database)(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stores", default="postgresql,sqlite")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--limit", type=int, default=45)
    parser.add_argument("--rounds", type=int, default=150)
    args = parser.parse_args()
    for store in args.stores.split(","):
        result = asyncio.run(measure(store, args.jobs, args.limit, args.rounds))
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
