"""Stored results on the drain path: the same drain with handlers that return None
(nothing stored, the default) and handlers that return a value (stored), in one run.

Each round enqueues N jobs through the public API (``App.aenqueue_many``) into a fresh
database, then one in-process server drains them; the clock runs from the server's
start until a poll (every 20 ms) sees every job completed; the process's CPU time
over the same span (the server, and the poll) is reported per 1,000 jobs, a steadier
figure than wall time on a shared machine. Variants alternate round
by round (none, small, 1kib, none, ...), so drift on a shared machine hits them alike:

- ``none``: ``return None``, stores nothing (the results write is the statement it
  was before stored results existed);
- ``small``: ``return {"n": ..., "ok": True}``, about 20 bytes stored per job;
- ``1kib``: a 1,024-character string stored per job.

Prints one JSON object per round, then a summary of the medians with each variant's
ratio to ``none`` (jobs/s, higher is better).

    python -m bench.bench_results --store postgres --jobs 10000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kiln
from bench.bench_drain import (
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
)

VARIANTS: dict[str, Callable[[int], Any]] = {
    "none": lambda n: None,
    "small": lambda n: {"n": n, "ok": True},
    "1kib": lambda n: "x" * 1024,
}
FAST = kiln.ServerConfig(poll_interval=0.05, heartbeat_interval=1.0, dead_after=60.0)


def fresh(store: str, tmp: Path, name: str) -> tuple[str, Callable[[], None]]:
    """A URL of a new, empty database and how to drop it."""
    if store == "postgres":
        url = fresh_database("kiln_bench_results")
        return url, lambda: drop_database(url)
    if store == "mysql":
        url = fresh_mysql_database("kiln_bench_results")
        return url, lambda: drop_mysql_database(url)
    path = tmp / f"{name}.db"
    return f"sqlite:///{path}", lambda: path.unlink(missing_ok=True)


async def drain(url: str, variant: str, jobs: int, concurrency: int) -> dict[str, Any]:
    app = kiln.App(url)
    value = VARIANTS[variant]

    @app.job("bench.result")
    async def handler(job: kiln.Job) -> Any:
        return value(job.args["n"])

    await app.amigrate()
    for start in range(0, jobs, 1000):
        await app.aenqueue_many(
            [("bench.result", {"n": n}) for n in range(start, min(start + 1000, jobs))]
        )
    client = app.client()
    done = kiln.JobFilter(states=(kiln.JobState.COMPLETED,))
    server = app.server({"default": concurrency}, FAST)
    began, cpu = time.perf_counter(), time.process_time()
    task = asyncio.create_task(server.run())
    try:
        while await client.count(done) < jobs:
            if task.done():
                task.result()
            await asyncio.sleep(0.02)
        took, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        server.stop()
        await asyncio.wait_for(task, 60)
    sample = await client.list(kiln.JobFilter(states=(kiln.JobState.COMPLETED,)), limit=1)
    stored = (await client.get(sample[0].id)) if sample else None
    await app.aclose()
    app.close()
    assert stored is not None, "no completed job"
    # getattr: the none variant also runs on a kiln from before stored results (--variants)
    assert getattr(stored, "result", None) == value(stored.args["n"]), "result not stored"
    return {"variant": variant, "jobs": jobs, "seconds": round(took, 3),
            "jobs_per_s": round(jobs / took, 1), "cpu_ms_per_1k": round(cpu / jobs * 1e6, 1)}


def summary(rows: list[dict[str, Any]], variants: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "summary": "medians per variant, and their ratio to none (jobs/s: higher is"
                   " better; worker CPU ms per 1,000 jobs: lower is better)",
    }
    for field in ("jobs_per_s", "cpu_ms_per_1k"):
        medians = {
            v: statistics.median(r[field] for r in rows if r["variant"] == v) for v in variants
        }
        base = medians.get("none")
        out[field] = medians
        out[f"{field}_ratio_to_none"] = (
            {v: round(m / base, 3) for v, m in medians.items()} if base else {}
        )
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("postgres", "mysql", "sqlite"), default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="comma-separated, of: " + ", ".join(VARIANTS))
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for variant in variants:
                url, drop = fresh(args.store, Path(tmp), f"{variant}-{round_}")
                try:
                    row = await drain(url, variant, args.jobs, args.concurrency)
                finally:
                    drop()
                row.update(store=args.store, round=round_)
                print(json.dumps(row), flush=True)
                rows.append(row)
    print(json.dumps({"store": args.store, **summary(rows, variants)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
