"""Claim cost of sharing a queue: our kind's claim behind another service's ready jobs.

The operator's guide: "the claim query walks past the other service's ready jobs to
reach its own kinds, about 34ms per 100,000 of them on PostgreSQL". This fills one queue
with ready jobs of a kind we have no handler for (in steps up to ``--foreign``), puts
one job of our kind behind them per timed claim, and times ``store.job_claim`` of our
kind (the query a pool runs, one round trip, limit 10). As a control, the same number
of foreign jobs in a queue of their own: the walk disappears. A fresh database of the
benchmark's own; ANALYZE after each fill. Prints one JSON object per step, then a
summary object with the cost per 100,000 foreign jobs (median at N minus median with
none, scaled to 100,000).

    python -m bench.bench_foreign_claim [--foreign 100000] [--claims 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from bench.bench_drain import drop_database, fresh_database, pg_execute
from kiln._model._job import NewJob
from kiln.stores import Store, store_from_url

QUEUE = "shared"
OURS, THEIRS = "ours.work", "theirs.work"
SERVER = "bench-foreign-claim"
BATCH = 5000


async def fill(store: Store, count: int, queue: str) -> None:
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        await store.job_insert_many([NewJob(THEIRS, {"n": start + i}, queue=queue)
                                     for i in range(size)])


async def timed_claims(store: Store, claims: int) -> list[float]:
    """Milliseconds per claim; each finds exactly the one job of ours behind the others."""
    times: list[float] = []
    for i in range(claims):
        await store.job_insert_many([NewJob(OURS, {"i": i}, queue=QUEUE)])
        begin = time.perf_counter()
        rows = await store.job_claim(QUEUE, [OURS], 10, SERVER)
        times.append((time.perf_counter() - begin) * 1000)
        assert [r.kind for r in rows] == [OURS], rows
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"median_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
            "min_ms": round(ordered[0], 3)}


async def run(foreign: int, claims: int, steps: int) -> list[dict[str, Any]]:
    url = fresh_database("kiln_foreign")
    results: list[dict[str, Any]] = []
    try:
        store = store_from_url(url)
        await store.open()
        try:
            await store.migrate()
            await timed_claims(store, 5)  # warm the pool and the prepared statement
            results.append({"setup": "shared queue", "foreign_ready": 0,
                            **summary(await timed_claims(store, claims))})
            filled = 0
            for step in range(1, steps + 1):
                target = foreign * step // steps
                await fill(store, target - filled, QUEUE)
                filled = target
                pg_execute("ANALYZE kiln_jobs", url)
                results.append({"setup": "shared queue", "foreign_ready": filled,
                                **summary(await timed_claims(store, claims))})
            # control: the foreign jobs move to a queue of their own
            pg_execute(f"DELETE FROM kiln_jobs WHERE kind = '{THEIRS}'", url)
            pg_execute("VACUUM ANALYZE kiln_jobs", url)
            await fill(store, foreign, "theirs")
            pg_execute("ANALYZE kiln_jobs", url)
            results.append({"setup": "own queue", "foreign_ready": foreign,
                            **summary(await timed_claims(store, claims))})
        finally:
            await store.close()
    finally:
        drop_database(url)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--foreign", type=int, default=100_000)
    parser.add_argument("--claims", type=int, default=40, help="timed claims per step")
    parser.add_argument("--steps", type=int, default=4, help="fills up to --foreign")
    args = parser.parse_args()
    results = asyncio.run(run(args.foreign, args.claims, args.steps))
    for row in results:
        print(json.dumps(row))
    shared = [r for r in results if r["setup"] == "shared queue"]
    base, full = shared[0]["median_ms"], shared[-1]["median_ms"]
    own = results[-1]["median_ms"]
    print(json.dumps({
        "summary": "claim of our kind behind foreign ready jobs, PostgreSQL",
        "foreign_ready": args.foreign,
        "median_ms_without_foreign": base,
        "median_ms_with_foreign_shared_queue": full,
        "median_ms_with_foreign_own_queue": own,
        "cost_ms_per_100k_foreign": round((full - base) * 100_000 / args.foreign, 2),
        "guide_says_ms_per_100k": 34,
    }))


if __name__ == "__main__":
    main()
