"""Producer CPU of one single-job enqueue, layer by layer, in one process (issue 41).

Interleaved rounds of ``--calls`` calls each, on PostgreSQL: ``raw_select`` (psycopg's
``execute("SELECT 1")``, the driver's round trip), ``raw_insert`` (psycopg executing
kiln's single-job insert, prepared, without NOTIFY), ``store`` (the store's
``job_insert_many([job])``, notify limiter on) and ``app`` (``app.enqueue`` /
``await app.aenqueue``, as a user calls it). The gaps between the layers are kiln's
own cost. Prints one JSON line per layer: the median CPU (user + system) and wall time
per call in µs, and the rounds' CPU, then voluntary and involuntary context switches
per ``app`` call.

Every process's CPU for one call grows with the time it waits (a wake-up costs), so on
a machine whose commits are slow the layers' differences drown in the waits; with
``--fast-commit`` every connection commits with ``synchronous_commit=off``, which
keeps the waits short and the comparison about the code.

    python bench/bench_enqueue_layers.py --mode sync --calls 1000 --rounds 3
    python bench/bench_enqueue_layers.py --mode async --fast-commit
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

import kiln
from kiln.stores.postgres import _insert

KIND = "bench.noop"
Samples = dict[str, list[tuple[float, float]]]


class _Round:
    def __init__(self, samples: Samples, layer: str, calls: int) -> None:
        self.samples, self.layer, self.calls = samples, layer, calls

    def __enter__(self) -> None:
        self.cpu, self.wall = time.process_time(), time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        cpu = (time.process_time() - self.cpu) / self.calls * 1e6
        wall = (time.perf_counter() - self.wall) / self.calls * 1e6
        self.samples.setdefault(self.layer, []).append((cpu, wall))


def _switches() -> tuple[int, int]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw, usage.ru_nivcsw


def run_sync(app: kiln.App, url: str, calls: int, rounds: int, samples: Samples) -> list[float]:
    raw = psycopg.connect(url, autocommit=True)
    client = app.sync_client()
    store: Any = client._store
    job = client.build(KIND, {"n": 1})
    app.enqueue(KIND, {"n": 0})
    switches: list[float] = []
    for _ in range(rounds):
        with _Round(samples, "raw_select", calls):
            for _ in range(calls):
                raw.execute("SELECT 1")
        with _Round(samples, "raw_insert", calls):
            for _ in range(calls):
                raw.execute(_insert.INSERT_ONE_QUIET, _insert.one_row(job), prepare=True)
        with _Round(samples, "store", calls):
            for _ in range(calls):
                store.job_insert_many_sync([job])
        before = _switches()
        with _Round(samples, "app", calls):
            for i in range(calls):
                app.enqueue(KIND, {"n": i})
        after = _switches()
        switches += [(after[0] - before[0]) / calls, (after[1] - before[1]) / calls]
    raw.close()
    return switches


async def run_async(
    app: kiln.App, url: str, calls: int, rounds: int, samples: Samples
) -> list[float]:
    raw = await psycopg.AsyncConnection.connect(url, autocommit=True)
    client = app.client()
    await client.enqueue(KIND, {"n": 0})
    store: Any = client._store
    job = client.build(KIND, {"n": 1})

    async def timed(layer: str, call: Callable[[int], Awaitable[object]]) -> None:
        with _Round(samples, layer, calls):
            for i in range(calls):
                await call(i)

    switches: list[float] = []
    for _ in range(rounds):
        await timed("raw_select", lambda i: raw.execute("SELECT 1"))
        await timed("raw_insert", lambda i: raw.execute(
            _insert.INSERT_ONE_QUIET, _insert.one_row(job), prepare=True))
        await timed("store", lambda i: store.job_insert_many([job]))
        before = _switches()
        await timed("app", lambda i: app.aenqueue(KIND, {"n": i}))
        after = _switches()
        switches += [(after[0] - before[0]) / calls, (after[1] - before[1]) / calls]
    await raw.close()
    await app.aclose()
    return switches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--fast-commit", action="store_true",
                        help="synchronous_commit=off on every connection (short waits)")
    args = parser.parse_args()
    url = args.url
    if args.fast_commit:
        url += ("&" if "?" in url else "?") + "options=-c%20synchronous_commit%3Doff"
    app = kiln.App(url)
    app.register(KIND, lambda job: None, queue="bench")
    app.migrate()
    samples: Samples = {}
    if args.mode == "sync":
        switches = run_sync(app, url, args.calls, args.rounds, samples)
    else:
        switches = asyncio.run(run_async(app, url, args.calls, args.rounds, samples))
    app.close()
    for layer, values in samples.items():
        print(json.dumps({
            "bench": "enqueue_layers", "mode": args.mode, "layer": layer,
            "fast_commit": args.fast_commit,
            "cpu_us": round(statistics.median(v[0] for v in values), 1),
            "wall_us": round(statistics.median(v[1] for v in values), 1),
            "rounds_cpu_us": [round(v[0], 1) for v in values],
        }))
    print(json.dumps({"bench": "enqueue_layers", "mode": args.mode,
                      "app_switches_per_call": {
                          "voluntary": round(statistics.median(switches[0::2]), 2),
                          "involuntary": round(statistics.median(switches[1::2]), 2)}}))


if __name__ == "__main__":
    main()
