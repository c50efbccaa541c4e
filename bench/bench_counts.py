"""The counts that kilnotel's publisher reads every counts_ttl, beside a table of finished
jobs: every state (what it read before issue 42), the live states only (what it reads
every counts_ttl now) and completed + cancelled (what it reads every
finished_counts_ttl).

The table gets ``--history`` finished jobs (90% completed, 10% failed, as
bench_scale ages them, then VACUUM ANALYZE or its counterpart) and ``--live`` jobs
available in 10 queues; each statement runs ``--rounds`` times through the store, and
the best and median wall times are printed as one JSON object per statement.

    python -m bench.bench_counts [--database postgresql|mariadb|sqlite] \\
        [--history 500000] [--live 2000] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import kiln
from bench.bench_scale import Db, enqueue, fill_history
from kiln.stores import store_from_url

LIVE = (kiln.JobState.AWAITING, kiln.JobState.PENDING, kiln.JobState.SCHEDULED,
        kiln.JobState.AVAILABLE, kiln.JobState.RUNNING, kiln.JobState.FAILED)
FINISHED = (kiln.JobState.COMPLETED, kiln.JobState.CANCELLED)


async def _time(call: Any, rounds: int) -> dict[str, float]:
    await call()  # warm: a prepared statement, the cache
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return {"best_ms": round(min(times), 2), "median_ms": round(statistics.median(times), 2)}


async def measure(db: Db, rounds: int) -> dict[str, dict[str, float]]:
    store = store_from_url(db.url)
    await store.open()
    try:
        return {
            "every state (before)": await _time(store.job_counts, rounds),
            "live states (every counts_ttl)": await _time(lambda: store.job_counts(LIVE), rounds),
            "completed + cancelled (every finished_counts_ttl)": await _time(
                lambda: store.job_counts(FINISHED), rounds),
        }
    finally:
        await store.close()


async def main_async(args: argparse.Namespace) -> None:
    db = Db(args.database)
    try:
        await fill_history(db, args.history)
        app = kiln.App(db.url)
        await app.amigrate()
        await app.aclose()
        await enqueue(db.url, args.live, first=args.history)
        for name, figures in (await measure(db, args.rounds)).items():
            print(json.dumps({"database": args.database, "history": args.history,
                              "live": args.live, "statement": name, **figures}))
    finally:
        db.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="postgresql",
                        choices=("postgresql", "mariadb", "sqlite"))
    parser.add_argument("--history", type=int, default=500_000)
    parser.add_argument("--live", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
