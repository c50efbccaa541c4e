"""The cost of observability: the drain benchmark with kilnotel on and off, same run.

Each run drains N no-op jobs with one worker process twice, interleaved: once bare,
once with ``kilnotel.observe`` fully on: metrics through a real SDK MeterProvider read
by the Prometheus reader (and /metrics scraped every second, as Prometheus would),
and tracing through an SDK TracerProvider whose BatchSpanProcessor hands every
span to an exporter that drops it. Prints one JSON line per drain, then a summary
with the median jobs/s of each and the slowdown (goal: under 10%).

    python -m bench.bench_otel_cost --jobs 20000 --concurrency 10 --runs 3
    python -m bench.bench_otel_cost --store sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import kiln
from bench.bench_drain import drop_database, fresh_database, measure, pg_execute
from kiln.stores import store_from_url

MODES = ("off", "on")
# "metrics" and "traces" are each half of "on", to see where the cost comes from;
# "sampled" is "on" with a 10% trace sampler, what a busy deployment would run
EXTRA_MODES = ("metrics", "traces", "sampled")


# --------------------------------------------------------------------------- worker
def _tracer_provider(ratio: float = 1.0) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Discard(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(ratio)))
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    return provider


def _scrape_every_second(port: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            r.read()


async def worker(url: str, concurrency: int, mode: str) -> None:
    app = kiln.App(url)

    @app.job("noop")
    async def noop(job: kiln.Job) -> None:
        return None

    server = app.server({"default": concurrency})
    stop = threading.Event()
    if mode != "off":
        from opentelemetry.sdk.metrics import MeterProvider

        import kilnotel

        provider, registry = kilnotel.prometheus_provider()
        if mode == "traces":
            provider = MeterProvider()  # no reader: instruments do nothing
        ratio = 0.1 if mode == "sampled" else 1.0
        kilnotel.observe(server, provider, _tracer_provider(ratio), traces=mode != "metrics")
        metrics = kilnotel.serve(registry, port=0)
        threading.Thread(
            target=_scrape_every_second, args=(metrics.port, stop), daemon=True
        ).start()
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    try:
        await server.run()
    finally:
        stop.set()


# ----------------------------------------------------------------------------- runs
async def _fill(url: str, jobs: int) -> None:
    store = store_from_url(url)
    await store.open()
    await store.migrate()
    client = kiln.Client(store)
    for start in range(0, jobs, 1000):
        await client.insert_many(
            [client.build("noop", {"n": i}) for i in range(start, min(start + 1000, jobs))]
        )
    await store.close()


def _sqlite_remaining(url: str) -> Callable[[], int]:
    import sqlite3

    path = url.removeprefix("sqlite:///")

    def remaining() -> int:
        with sqlite3.connect(path, timeout=30) as conn:
            row = conn.execute("SELECT count(*) FROM kiln_jobs WHERE state <> 'completed'")
            return int(row.fetchone()[0])

    return remaining


def drain(store: str, jobs: int, concurrency: int, mode: str) -> dict[str, Any]:
    tmp = tempfile.TemporaryDirectory() if store == "sqlite" else None
    url = f"sqlite:///{Path(tmp.name) / 'bench.db'}" if tmp else fresh_database("kiln_otel")
    try:
        asyncio.run(_fill(url, jobs))
        if tmp is not None:
            remaining = _sqlite_remaining(url)
        else:
            def remaining() -> int:
                sql = "SELECT count(*) FROM kiln_jobs WHERE state <> 'completed'"
                return int(pg_execute(sql, url)[0][0])
        cmd = [sys.executable, "-m", "bench.bench_otel_cost", "--worker", url,
               str(concurrency), mode]
        db = "postgres" if tmp is None else "python"
        result = measure(f"kilnotel {mode}", cmd, remaining, jobs, db)
        result.update(store=store, mode=mode)
        return result
    finally:
        if tmp is not None:
            tmp.cleanup()
        else:
            drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"of {MODES + EXTRA_MODES}; the summary compares off and on")
    parser.add_argument("--worker", nargs=3, metavar=("URL", "CONCURRENCY", "MODE"))
    args = parser.parse_args()
    if args.worker:
        url, concurrency, mode = args.worker
        asyncio.run(worker(url, int(concurrency), mode))
        return
    modes = tuple(args.modes.split(","))
    runs: list[dict[str, dict[str, Any]]] = []
    for run in range(args.runs):
        order = modes if run % 2 == 0 else tuple(reversed(modes))  # drift hits all alike
        runs.append({})
        for mode in order:
            result = drain(args.store, args.jobs, args.concurrency, mode)
            runs[-1][mode] = result
            print(json.dumps(result), flush=True)
    print(json.dumps({"summary": summarize(runs, modes, args)}, indent=2))


def summarize(
    runs: list[dict[str, dict[str, Any]]], modes: Sequence[str], args: argparse.Namespace
) -> dict[str, Any]:
    """Medians per mode, and each mode against "off" as the median of per-run ratios:
    a run's drains follow each other closely, so the ratio within a run cancels most
    of the noise of a shared machine that the ratio of medians would keep."""
    def median(mode: str, key: str) -> float:
        return round(statistics.median(r[mode][key] for r in runs), 4)

    summary: dict[str, Any] = {
        "store": args.store, "jobs": args.jobs, "concurrency": args.concurrency,
        "runs": args.runs,
        "jobs_per_s": {m: median(m, "jobs_per_s") for m in modes},
        "worker_cpu_s_per_1000": {m: median(m, "worker_cpu_s_per_1000") for m in modes},
    }
    if "off" in modes:
        summary["vs_off"] = {
            m: {
                "jobs_per_s_ratio": round(statistics.median(
                    r[m]["jobs_per_s"] / r["off"]["jobs_per_s"] for r in runs), 3),
                "slowdown_pct": round(100 * (1 - statistics.median(
                    r[m]["jobs_per_s"] / r["off"]["jobs_per_s"] for r in runs)), 1),
                "worker_cpu_us_per_job_added": round(1000 * statistics.median(
                    r[m]["worker_cpu_s_per_1000"] - r["off"]["worker_cpu_s_per_1000"]
                    for r in runs), 1),
            }
            for m in modes if m != "off"
        }
        summary["goal"] = "vs_off.on.slowdown_pct < 10"
    return summary


if __name__ == "__main__":
    main()
