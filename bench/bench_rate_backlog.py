"""How fast a backlog of one rate-limited kind goes, against the rate it declares.

One in-process server (concurrency 20) drains a backlog of ``--jobs`` no-op jobs of a
kind declared ``rate_limit=kiln.RateLimit(rate, per=1, burst=B)``, enqueued through
the public API; after a second's warm-up the completions over ``--seconds`` are
counted. Prints one JSON line per (rate, burst): completed jobs/s and its ratio to the
rate (1.0: the backlog goes at the rate).

    python -m bench.bench_rate_backlog --store postgres --limits 50:0,1000:0,1000:50
    python -m bench.bench_rate_backlog --store sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import kiln
from bench.bench_results import fresh

FAST = kiln.ServerConfig(poll_interval=0.2, heartbeat_interval=1.0, dead_after=60.0)


async def drain(url: str, rate: int, burst: int, jobs: int, seconds: float) -> float:
    app = kiln.App(url)

    @app.job("bench.limited", rate_limit=kiln.RateLimit(rate, per=1, burst=burst))
    async def limited(job: kiln.Job) -> None:
        return None

    await app.amigrate()
    for start in range(0, jobs, 1000):
        await app.aenqueue_many([("bench.limited", {"n": n})
                                 for n in range(start, min(start + 1000, jobs))])
    client = app.client()
    done = kiln.JobFilter(states=(kiln.JobState.COMPLETED,))
    server = app.server({"default": 20}, FAST)
    task = asyncio.create_task(server.run())
    try:
        await asyncio.sleep(1.0)
        before, began = await client.count(done), time.perf_counter()
        await asyncio.sleep(seconds)
        after = await client.count(done)
        return (after - before) / (time.perf_counter() - began)
    finally:
        server.stop()
        await asyncio.wait_for(task, 60)
        await app.aclose()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["postgres", "mysql", "sqlite"], default="postgres")
    parser.add_argument("--limits", default="50:0,200:0,1000:0,1000:50,5000:250",
                        help="rate:burst pairs, comma-separated")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    for pair in args.limits.split(","):
        rate, burst = (int(x) for x in pair.split(":"))
        with tempfile.TemporaryDirectory() as tmp:
            url, drop = fresh(args.store, Path(tmp), "rate")
            try:
                per_s = asyncio.run(drain(url, rate, burst, args.jobs, args.seconds))
            finally:
                drop()
        print(json.dumps({"store": args.store, "rate": rate, "burst": burst,
                          "completed_per_s": round(per_s, 1),
                          "ratio_to_rate": round(per_s / rate, 3)}))


if __name__ == "__main__":
    main()
