"""How fast rate-limited backlogs go, against the rate they declare, on every store.

One in-process server (concurrency 20) drains a backlog of no-op jobs enqueued through
the public API; after a second's warm-up the completions over ``--seconds`` are
counted. Scenarios (``--scenarios``):

- ``one``: ``--jobs`` (20,000) jobs of one kind with ``RateLimit(rate, per=1,
  burst=B)`` for each ``--limits`` pair (default 1000:0, the natural call);
- ``keys``: 40 keys (``RateLimit(25, per=1, key="args.tenant")``, burst 0), 500 jobs
  each: the aggregate rate is 1,000 a second;
- ``backlog``: ``--big`` (200,000) jobs of ``RateLimit(1000, per=1)``, burst 0;
- ``plain``: ``--jobs`` jobs of a kind without a limit: what the server drains on the
  machine meanwhile (its ratio is a multiple of 1,000 a second), so that a ratio below
  1 on a loaded machine can be told from a machine that could not go faster anyway.

Prints one JSON line per store and scenario: completed jobs/s, the rate, their ratio
(1.0: the backlog goes at the rate), and the machine's load average when it ran.

    python -m bench.bench_rate_backlog --stores postgres,sqlite,mysql
    python -m bench.bench_rate_backlog --stores sqlite --scenarios one --limits 50:0,1000:0
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import kiln
from bench.bench_results import fresh
from kiln._server.maintenance import admitter

FAST = kiln.ServerConfig(poll_interval=0.2, heartbeat_interval=1.0, dead_after=60.0)
KEYS, KEY_RATE = 40, 25


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    limit: kiln.RateLimit
    jobs: int
    keys: int = 1  # > 1: the limit is per args.tenant, jobs spread over this many; 0: none

    @property
    def rate(self) -> float:
        """The aggregate rate (a plain drain: 1,000, so its ratio reads as a multiple)."""
        return max(self.keys, 1) * self.limit.rate / self.limit.per


async def _enqueue(app: kiln.App, s: Scenario) -> None:
    for start in range(0, s.jobs, 1000):
        await app.aenqueue_many([("bench.limited", {"n": n, "tenant": n % max(s.keys, 1)})
                                 for n in range(start, min(start + 1000, s.jobs))])


async def drain(url: str, s: Scenario, seconds: float) -> float:
    app = kiln.App(url)
    limit = None if s.keys == 0 else s.limit if s.keys == 1 else \
        dataclasses.replace(s.limit, key="args.tenant")

    @app.job("bench.limited", rate_limit=limit)
    async def limited(job: kiln.Job) -> None:
        return None

    await app.amigrate()
    await _enqueue(app, s)
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


def scenarios(names: list[str], limits: str, jobs: int, big: int) -> list[Scenario]:
    out: list[Scenario] = []
    for name in names:
        if name == "one":
            for pair in limits.split(","):
                rate, burst = (int(x) for x in pair.split(":"))
                out.append(Scenario(f"one {rate}:{burst}", kiln.RateLimit(rate, per=1,
                                                                          burst=burst), jobs))
        elif name == "keys":
            out.append(Scenario(f"keys {KEYS}x{KEY_RATE}", kiln.RateLimit(KEY_RATE, per=1),
                                KEYS * 500, keys=KEYS))
        elif name == "plain":  # no limit: what the machine drains meanwhile, for scale
            out.append(Scenario("plain", kiln.RateLimit(1000, per=1), jobs, keys=0))
        elif name == "backlog":
            out.append(Scenario(f"backlog {big}", kiln.RateLimit(1000, per=1), big))
        else:
            raise SystemExit(f"unknown scenario {name!r}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="postgres,sqlite,mysql")
    parser.add_argument("--scenarios", default="plain,one,keys,backlog")
    parser.add_argument("--limits", default="1000:0",
                        help="rate:burst pairs of the 'one' scenario, comma-separated")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--big", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--ahead", type=float, default=admitter.AHEAD,
                        help="seconds the admitter admits ahead (kiln's default: %(default)s)")
    args = parser.parse_args()
    admitter.AHEAD = args.ahead
    for store in args.stores.split(","):
        for s in scenarios(args.scenarios.split(","), args.limits, args.jobs, args.big):
            with tempfile.TemporaryDirectory() as tmp:
                url, drop = fresh(store, Path(tmp), "rate")
                try:
                    per_s = asyncio.run(drain(url, s, args.seconds))
                finally:
                    drop()
            print(json.dumps({
                "store": store, "scenario": s.name, "jobs": s.jobs, "rate": s.rate,
                "completed_per_s": round(per_s, 1), "ratio_to_rate": round(per_s / s.rate, 3),
                "ahead": args.ahead, "load": round(os.getloadavg()[0], 2),
            }), flush=True)


if __name__ == "__main__":
    main()
