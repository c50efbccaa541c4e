"""The cost of observability: the drain benchmark with kilnotel on and off, same run.

Each run drains N no-op jobs with one worker process twice, interleaved: once bare,
once with ``kilnotel.observe`` fully on: metrics on ``kilnotel.prometheus_provider()``
(and /metrics scraped every second, as Prometheus would), and tracing of every
attempt through an SDK TracerProvider with its default sampler, ParentBased(AlwaysOn),
whose BatchSpanProcessor hands every span to an exporter that drops it. Prints one
JSON line per drain, then a summary with the median jobs/s of each and the slowdown
(goal: under 10%).

``--components`` runs no database: it drives a server's events and middleware the
way the pool and executor do around a no-op job, and prints the CPU each part of
kilnotel adds per job (metrics on either histogram path, kilnotel's tracing work
through a no-op tracer, SDK spans without and with the batch processor, sampling).

    python -m bench.bench_otel_cost --jobs 20000 --concurrency 10 --runs 3
    python -m bench.bench_otel_cost --store sqlite
    python -m bench.bench_otel_cost --components --jobs 20000 --runs 5
    python -m bench.bench_otel_cost --profile --jobs 5000 --runs 15

``--profile`` runs no database either: kilnotel's tracing alone, per attempt (the
middleware around a no-op handler and the attempt's JobFinished, every attempt traced
through a BatchSpanProcessor, minus the same attempts with metrics only), the best of
``--runs`` batches of ``--jobs`` attempts, the cyclic GC collections per 1,000 attempts,
and a cProfile of the traced attempts: the functions taking the most of its time.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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
# "sampled" is "on" with a 10% trace sampler, what a busy deployment would run;
# "noop" and "bare" are the floor of tracing inside the drain: "metrics" plus
# kilnotel's tracing work through the API's no-op tracer (no span is made), and plus
# SDK spans handed to no span processor (every span made and ended, none queued);
# "simple" is "on" with a SimpleSpanProcessor instead of the batch processor
EXTRA_MODES = ("metrics", "traces", "sampled", "noop", "bare", "simple")


# --------------------------------------------------------------------------- worker
def _tracer_provider(
    ratio: float = 1.0, queue: int | None = None, simple: bool = False
) -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

    class Discard(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    # every attempt: the SDK's default sampler, ParentBased(AlwaysOn)
    root = ALWAYS_ON if ratio >= 1.0 else TraceIdRatioBased(ratio)
    provider = TracerProvider(sampler=ParentBased(root))
    if simple:  # each span exported as it ends, on the worker's own thread
        provider.add_span_processor(SimpleSpanProcessor(Discard()))
    else:
        provider.add_span_processor(BatchSpanProcessor(Discard(), max_queue_size=queue))
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
        tracer_provider = _tracer_provider(ratio)
        if mode == "noop":
            from opentelemetry.trace import NoOpTracerProvider

            tracer_provider = NoOpTracerProvider()
        elif mode == "bare":
            from opentelemetry.sdk.trace import TracerProvider

            tracer_provider = TracerProvider()  # the default sampler, no processor
        elif mode == "simple":
            tracer_provider = _tracer_provider(simple=True)
        kilnotel.observe(server, provider, tracer_provider, traces=mode != "metrics")
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


# ----------------------------------------------------------------------- components
COMPONENTS = (
    ("bare", "none", "none"),
    ("metrics, prometheus_provider()", "prometheus", "none"),
    ("metrics, SDK histograms (any other provider)", "sdk", "none"),
    ("metrics + tracing through a no-op tracer", "prometheus", "noop"),
    ("metrics + SDK spans, no span processor", "prometheus", "bare"),
    ("metrics + SDK spans, batch processor (on)", "prometheus", "batch"),
    ("metrics + SDK spans, 10% sampled", "prometheus", "sampled"),
)


def _component_server(
    meters: str, tracer: str, queue: int | None = None
) -> tuple[kiln.Server, Any]:
    """A server (never run) observed as described, and the middleware to call."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    import kilnotel

    app = kiln.App("sqlite:///:memory:")
    app.job("noop")(_noop)
    server = app.server({"default": 10})
    if meters == "none":
        return server, None
    provider: Any = (kilnotel.prometheus_provider()[0] if meters == "prometheus"
                     else MeterProvider(metric_readers=[InMemoryMetricReader()]))
    tracers: dict[str, Any] = {
        "noop": NoOpTracerProvider(), "bare": TracerProvider(),
        "batch": _tracer_provider(1.0, queue), "sampled": _tracer_provider(0.1, queue),
    }
    observer = kilnotel.observe(server, provider, tracers.get(tracer), traces=tracer != "none",
                                counts_ttl=86400.0)  # one (failing) count query per drive
    return server, observer.tracing.middleware if observer.tracing else None


async def _noop(job: kiln.Job) -> None:
    return None


async def _drive(server: kiln.Server, middleware: Any, jobs: int) -> float:
    """What the pool and executor do around a no-op job, minus the store: the events
    and the middleware. Returns process CPU µs per job (every thread)."""
    import datetime as dt
    import time

    from kiln._handle import Job
    from kiln._job import JobRow, JobState

    hub, now, loop = server.events, dt.datetime.now(dt.UTC), asyncio.get_running_loop()

    async def writer(row: JobRow, name: str, value: Any) -> bool:
        return True

    async def one(row: JobRow) -> None:
        if hub.wants(kiln.JobStarted):
            hub.emit(kiln.JobStarted(job=row))
        began = time.monotonic()
        if middleware is None:
            await _noop(Job(row, writer, loop))
        else:
            job = Job(row, writer, loop)
            await middleware(job, lambda: _noop(job))
        if hub.wants(kiln.JobFinished):
            hub.emit(kiln.JobFinished(job=row, outcome=kiln.Outcome.COMPLETED,
                                      duration=time.monotonic() - began))

    cpu = time.process_time()
    for start in range(0, jobs, 10):
        rows = [JobRow(
            id=i, queue="default", kind="noop", state=JobState.RUNNING, args={}, params={},
            metadata={}, priority=0, run_at=now, attempt=1, max_attempts=25, timeout=None,
            backoff=None, errors=[], created_at=now, admitted_at=None, attempted_at=now,
            finished_at=None, server_id="s", rate_key=None, rescues=0,
        ) for i in range(start, start + 10)]
        if hub.wants(kiln.ClaimQueried):
            hub.emit(kiln.ClaimQueried(queue="default", duration=0.001, claimed=len(rows)))
        if hub.wants(kiln.JobClaimed):
            for row in rows:
                hub.emit(kiln.JobClaimed(job=row, latency=0.01))
        await asyncio.gather(*[loop.create_task(one(r)) for r in rows])
    return (time.process_time() - cpu) / jobs * 1e6


def components(jobs: int, runs: int) -> dict[str, Any]:
    """µs of CPU per job each configuration adds to the bare events and middleware:
    where the cost of observing goes, without the database's noise."""
    import logging

    logging.getLogger("kilnotel.counts").setLevel(logging.ERROR)  # no database here
    times: dict[str, list[float]] = {label: [] for label, _m, _t in COMPONENTS}
    for _run in range(runs):
        for label, meters, tracer in COMPONENTS:
            server, middleware = _component_server(meters, tracer)
            times[label].append(asyncio.run(_drive(server, middleware, jobs)))
    bare = statistics.median(times["bare"])
    return {
        "jobs": jobs, "runs": runs, "bare_us_per_job": round(bare, 1),
        "added_us_per_job": {label: round(statistics.median(t) - bare, 1)
                             for label, t in times.items() if label != "bare"},
    }


# -------------------------------------------------------------------------- profile
async def _attempts(server: kiln.Server, middleware: Any, rows: Sequence[Any]) -> None:
    """One attempt after the other, as the executor runs them: the middleware (if any)
    around the handler, then the attempt's JobFinished."""
    from kiln._handle import Job

    hub, loop = server.events, asyncio.get_running_loop()

    async def writer(row: Any, name: str, value: Any) -> bool:
        return True

    for row in rows:
        job = Job(row, writer, loop)
        if middleware is None:
            await _noop(job)
        else:
            await middleware(job, functools.partial(_noop, job))
        hub.emit(kiln.JobFinished(job=row, outcome=kiln.Outcome.COMPLETED, duration=0.001))


def _rows(jobs: int) -> list[Any]:
    import datetime as dt

    from kiln._job import JobRow, JobState

    now = dt.datetime.now(dt.UTC)
    return [JobRow(
        id=i, queue="default", kind="noop", state=JobState.RUNNING, args={}, params={},
        metadata={}, priority=0, run_at=now, attempt=1, max_attempts=25, timeout=None,
        backoff=None, errors=[], created_at=now, admitted_at=None, attempted_at=now,
        finished_at=None, server_id="s", rate_key=None, rescues=0,
    ) for i in range(jobs)]


def _cpu_per_attempt(server: kiln.Server, middleware: Any, rows: Sequence[Any]) -> float:
    import time

    cpu = time.process_time()
    asyncio.run(_attempts(server, middleware, rows))
    return (time.process_time() - cpu) / len(rows) * 1e6


def _collections() -> int:
    import gc

    return sum(stat["collections"] for stat in gc.get_stats())


def profile(jobs: int, runs: int, top: int = 25) -> dict[str, Any]:
    """kilnotel's tracing alone per attempt (best of ``runs``), GC collections, and
    the cProfile top list of the traced attempts."""
    import cProfile
    import io
    import logging
    import pstats

    logging.getLogger("kilnotel.counts").setLevel(logging.ERROR)  # no database here
    # attempts back to back give the export thread few chances at the GIL: a queue
    # that holds them all, so that no span is dropped (appending costs the same)
    traced, traced_mw = _component_server("prometheus", "batch", queue=jobs * 2)
    metrics, _none = _component_server("prometheus", "none")
    on: list[float] = []
    off: list[float] = []
    gcs: dict[str, list[float]] = {"traced": [], "metrics_only": []}
    for _run in range(runs):
        for label, server, middleware, times in (
                ("traced", traced, traced_mw, on), ("metrics_only", metrics, None, off)):
            rows = _rows(jobs)
            before = _collections()
            times.append(_cpu_per_attempt(server, middleware, rows))
            gcs[label].append((_collections() - before) * 1000 / jobs)
    profiler = cProfile.Profile()
    rows = _rows(jobs)
    profiler.enable()
    asyncio.run(_attempts(traced, traced_mw, rows))
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    total = float(stats.total_tt)  # type: ignore[attr-defined]
    listing = []
    entries = stats.stats  # type: ignore[attr-defined]
    for (file, line, func), (_cc, calls, tt, ct, _callers) in sorted(
            entries.items(), key=lambda item: -item[1][2])[:top]:
        where = file.split("site-packages/")[-1].removeprefix(str(Path.cwd()) + "/")
        listing.append({"function": f"{where}:{line}({func})", "calls_per_attempt":
                        round(calls / jobs, 2), "tottime_pct": round(100 * tt / total, 1),
                        "cumtime_pct": round(100 * ct / total, 1)})
    return {
        "jobs": jobs, "runs": runs,
        "tracing_us_per_attempt_best": round(min(on) - min(off), 2),
        "tracing_us_per_attempt_median": round(statistics.median(on) - statistics.median(off), 2),
        "metrics_only_us_per_attempt_best": round(min(off), 2),
        "gc_collections_per_1000_attempts": {
            label: round(statistics.median(counts), 2) for label, counts in gcs.items()},
        "profile_top_by_own_time": listing,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--store", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"of {MODES + EXTRA_MODES}; the summary compares off and on")
    parser.add_argument("--worker", nargs=3, metavar=("URL", "CONCURRENCY", "MODE"))
    parser.add_argument("--components", action="store_true",
                        help="no database: the µs per job each part of kilnotel adds")
    parser.add_argument("--profile", action="store_true",
                        help="no database: kilnotel's tracing alone per attempt, profiled")
    args = parser.parse_args()
    if args.profile:
        print(json.dumps(profile(args.jobs, args.runs), indent=2))
        return
    if args.components:
        print(json.dumps(components(args.jobs, args.runs), indent=2))
        return
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
