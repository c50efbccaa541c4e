"""Requeue of many failed jobs: in batches (what ``kiln jobs requeue --state failed`` and
the dashboard's "Requeue all matching" run, kiln._client._bulk) beside one requeue statement
over all of them (``Client.requeue``), on PostgreSQL.

Each run fills a fresh table with ``--jobs`` failed jobs (args of a realistic size, an
error with a traceback) and ANALYZEs it, as autovacuum would after such a fill (without
statistics the planner sorts every failed job for each page), then requeues them one
way; the two ways alternate, run by run.
The longest transaction of the batched way is the slowest batch's store call
(``jobs_requeue``: one transaction); of the single way, the whole call. Prints one JSON
object per run, then a summary with medians and the median of per-run ratios.

    python -m bench.bench_bulk [--jobs 100000] [--runs 3] [--batch 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

from bench.bench_drain import drop_database, fresh_database, pg_execute
from kiln._client._bulk import Bulk
from kiln._client._client import Client
from kiln._model._job import AttemptError, JobFilter, JobResult, JobState, NewJob, Outcome
from kiln.stores import Store, store_from_url

FAILED = JobFilter(states=(JobState.FAILED,))
TRACEBACK = "".join(f'  File "app/jobs.py", line {i}, in step{i}\n    do_step()\n'
                    for i in range(12)) + "RuntimeError: upstream said 503\n"


async def fill(store: Store, count: int) -> None:
    """``count`` failed jobs, failed the way a worker fails them (claim, then result)."""
    for start in range(0, count, 1000):
        size = min(1000, count - start)
        await store.job_insert_many([
            NewJob("email.send", {"to": f"user{start + i}@example.com", "template": "welcome",
                                  "locale": "en", "vars": {"n": start + i, "plan": "pro"}},
                   queue="mail", max_attempts=1)
            for i in range(size)])
        rows = await store.job_claim("mail", ["email.send"], size, "bench-bulk")
        await store.job_results_apply([
            JobResult(job_id=r.id, server_id="bench-bulk", attempt=r.attempt,
                      outcome=Outcome.FAILED,
                      error=AttemptError(r.attempt, time.time(), "RuntimeError: upstream"
                                         " said 503", "Traceback:\n" + TRACEBACK))
            for r in rows])


def timed_requeue(store: Store, calls: list[float]) -> None:
    """Record the duration of each ``jobs_requeue`` call (one transaction each)."""
    original = store.jobs_requeue

    async def requeue(f: JobFilter, dead_after: float = 60.0) -> int:
        begin = time.perf_counter()
        try:
            return await original(f, dead_after)
        finally:
            calls.append(time.perf_counter() - begin)

    setattr(store, "jobs_requeue", requeue)  # noqa: B010


async def one_run(way: str, jobs: int, batch: int) -> dict[str, Any]:
    url = fresh_database("kiln_bench_bulk")
    store = store_from_url(url)
    await store.open()
    try:
        await store.migrate()
        await fill(store, jobs)
        pg_execute("ANALYZE kiln_jobs", url)  # as autovacuum would after such a fill
        calls: list[float] = []
        timed_requeue(store, calls)
        client = Client(store)
        begin = time.perf_counter()
        if way == "batched":
            bulk = await Bulk.begin(client, "requeue", FAILED, actor="bench",
                                    batch_size=batch)
            done = (await bulk.run()).done
        else:
            done = await client.requeue(FAILED, actor="bench")
        wall = time.perf_counter() - begin
        assert done == jobs, (done, jobs)
        return {"way": way, "jobs": jobs, "seconds": round(wall, 3),
                "transactions": len(calls),
                "longest_transaction_ms": round(max(calls) * 1000, 1),
                "median_transaction_ms": round(statistics.median(calls) * 1000, 1)}
    finally:
        await store.close()
        drop_database(url)


async def main(jobs: int, runs: int, batch: int) -> None:
    results: dict[str, list[dict[str, Any]]] = {"batched": [], "single": []}
    for i in range(runs):
        for way in (("batched", "single") if i % 2 == 0 else ("single", "batched")):
            result = await one_run(way, jobs, batch)
            results[way].append(result)
            print(json.dumps(result), flush=True)
    b, s = results["batched"], results["single"]
    print(json.dumps({
        "summary": True, "jobs": jobs, "batch": batch, "runs": runs,
        "load": os.getloadavg(),
        "batched_seconds": statistics.median(r["seconds"] for r in b),
        "single_seconds": statistics.median(r["seconds"] for r in s),
        "batched_longest_transaction_ms": statistics.median(
            r["longest_transaction_ms"] for r in b),
        "single_longest_transaction_ms": statistics.median(
            r["longest_transaction_ms"] for r in s),
        "time_ratio_batched_to_single": round(statistics.median(
            x["seconds"] / y["seconds"] for x, y in zip(b, s, strict=True)), 2),
        "longest_transaction_ratio": round(statistics.median(
            x["longest_transaction_ms"] / y["longest_transaction_ms"]
            for x, y in zip(b, s, strict=True)), 3),
    }))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    asyncio.run(main(args.jobs, args.runs, args.batch))
