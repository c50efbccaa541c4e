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

``--otlp`` runs no database either, and exports for real: the attempts of
``--profile`` (the middleware around a no-op handler, then the attempt's JobFinished,
one after the other) observed through the providers ``kiln worker --otlp-endpoint``
builds (``kilnotel.otlp_providers``: the OTLP/HTTP protobuf exporters, a
BatchSpanProcessor, ``ParentBased(ProducerSampler(ratio))``), exporting to a sink on
loopback in a process of its own (``--sink``: an HTTP server that takes OTLP/protobuf and
counts what it decodes). The clock is the bench process's CPU, every thread (the batch
processor's and the metric reader's included), up to a ``force_flush`` that returns once
the sink has the spans; the sink's CPU is not in it. It prints, and writes to ``--out``
(``bench/otel_cost.json``), the CPU per attempt of each configuration and the
differences: an unsampled attempt, a sampled one, an exported span, and metrics over
OTLP against the /metrics path.

    python -m bench.bench_otel_cost --otlp --jobs 5000 --runs 5

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
import kiln.events
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
        await client.enqueue_many(
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

    from kiln._model._job import JobRow, JobState
    from kiln._server._handle import Job

    hub, now, loop = server.events, dt.datetime.now(dt.UTC), asyncio.get_running_loop()

    async def writer(row: JobRow, name: str, value: Any) -> bool:
        return True

    async def one(row: JobRow) -> None:
        if hub.wants(kiln.events.JobStarted):
            hub.emit(kiln.events.JobStarted(job=row))
        began = time.monotonic()
        if middleware is None:
            await _noop(Job(row, writer, loop))
        else:
            job = Job(row, writer, loop)
            await middleware(job, lambda: _noop(job))
        if hub.wants(kiln.events.JobFinished):
            hub.emit(kiln.events.JobFinished(job=row, outcome=kiln.Outcome.COMPLETED,
                                      duration=time.monotonic() - began))

    cpu = time.process_time()
    for start in range(0, jobs, 10):
        rows = [JobRow(
            id=i, queue="default", kind="noop", state=JobState.RUNNING, args={}, params={},
            metadata={}, priority=0, run_at=now, attempt=1, max_attempts=25, timeout=None,
            backoff=None, errors=[], created_at=now, admitted_at=None, attempted_at=now,
            finished_at=None, server_id="s", rate_key=None, rescues=0,
        ) for i in range(start, start + 10)]
        if hub.wants(kiln.events.ClaimQueried):
            hub.emit(kiln.events.ClaimQueried(queue="default", duration=0.001, claimed=len(rows)))
        if hub.wants(kiln.events.JobClaimed):
            for row in rows:
                hub.emit(kiln.events.JobClaimed(job=row, latency=0.01))
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
    from kiln._server._handle import Job

    hub, loop = server.events, asyncio.get_running_loop()

    async def writer(row: Any, name: str, value: Any) -> bool:
        return True

    for row in rows:
        job = Job(row, writer, loop)
        if middleware is None:
            await _noop(job)
        else:
            await middleware(job, functools.partial(_noop, job))
        hub.emit(kiln.events.JobFinished(job=row, outcome=kiln.Outcome.COMPLETED, duration=0.001))


def _rows(jobs: int) -> list[Any]:
    import datetime as dt

    from kiln._model._job import JobRow, JobState

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


# ----------------------------------------------------------------------------- otlp
def sink() -> None:
    """An OTLP/HTTP receiver on loopback (this process): takes ``POST /v1/traces`` and
    ``/v1/metrics`` (protobuf), decodes and counts them; ``GET /count`` answers
    ``{"spans": n, "metric_points": m}``. Prints its port; exits when stdin closes."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    counts = {"spans": 0, "metric_points": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # the http.server API's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/traces":
                req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                n = sum(len(ss.spans) for rs in req.resource_spans for ss in rs.scope_spans)
                key = "spans"
            else:
                mreq = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                n = sum(len(getattr(m, m.WhichOneof("data")).data_points)
                        for rm in mreq.resource_metrics for sm in rm.scope_metrics
                        for m in sm.metrics)
                key = "metric_points"
            with lock:
                counts[key] += n
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            with lock:
                body = json.dumps(counts).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    print(httpd.server_address[1], flush=True)
    sys.stdin.read()
    httpd.shutdown()


OTLP_CONFIGS = (
    # (name, metrics, tracing): metrics "prometheus" is prometheus_provider() (kilnotel's
    # own histograms, scraped once at the end), "otlp" otlp_providers()' SDK meter
    # provider exporting to the sink (flushed once at the end); tracing "otlp:R" is
    # otlp_providers()' tracer provider at ratio R, "discard:1" the same sampler and
    # batch processor with an exporter that drops the spans
    ("none", "none", "none"),
    ("metrics_prometheus", "prometheus", "none"),
    ("metrics_otlp", "otlp", "none"),
    ("noop_tracer", "prometheus", "noop"),
    ("unsampled", "prometheus", "otlp:0"),
    ("ratio_0.1", "prometheus", "otlp:0.1"),
    ("sampled_discarded", "prometheus", "discard:1"),
    ("sampled_exported", "prometheus", "otlp:1"),
)


def _every(calls: list[Callable[[], None]]) -> Callable[[], None]:
    def call() -> None:
        for f in calls:
            f()
    return call


def _flusher(provider: Any) -> Callable[[], None]:
    def flush() -> None:
        provider.force_flush()
    return flush


def _otlp_setup(metrics: str, tracing: str, endpoint: str) -> tuple[
        kiln.Server, Any, Callable[[], None], Callable[[], None]]:
    """A server (never run) observed as described, its middleware, what to do before
    the clock stops (scrape, flush) and what to do after (shut the providers down)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ParentBased
    from opentelemetry.trace import NoOpTracerProvider
    from prometheus_client import generate_latest

    import kilnotel
    from kilnotel._prometheus import default_resource

    app = kiln.App("sqlite:///:memory:")
    app.job("noop")(_noop)
    server = app.server({"default": 10})
    if metrics == "none":
        return server, None, lambda: None, lambda: None
    finish: list[Callable[[], None]] = []
    shutdown: list[Callable[[], None]] = []
    if metrics == "prometheus":
        meter_provider, registry = kilnotel.prometheus_provider()
        def scrape() -> None:
            generate_latest(registry)

        finish.append(scrape)
    else:
        meter_provider, _t = kilnotel.otlp_providers(
            endpoint, environ={"OTEL_TRACES_EXPORTER": "none"})
        finish.append(_flusher(meter_provider))
    shutdown.append(meter_provider.shutdown)
    tracer_provider: Any = None
    if tracing == "noop":
        tracer_provider = NoOpTracerProvider()
    elif tracing.startswith("otlp:"):
        _m, tracer_provider = kilnotel.otlp_providers(
            endpoint, environ={"OTEL_METRICS_EXPORTER": "none"},
            sample_ratio=float(tracing.removeprefix("otlp:")))
        _m.shutdown()
    elif tracing.startswith("discard:"):
        class Discard(SpanExporter):
            def export(self, spans: Sequence[Any]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        tracer_provider = TracerProvider(resource=default_resource(), sampler=ParentBased(
            kilnotel.ProducerSampler(float(tracing.removeprefix("discard:")))))
        tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
    if tracer_provider is not None and hasattr(tracer_provider, "force_flush"):
        finish.append(_flusher(tracer_provider))
        shutdown.append(tracer_provider.shutdown)
    observer = kilnotel.observe(server, meter_provider, tracer_provider,
                                traces=tracing != "none", counts_ttl=86400.0)
    shutdown.insert(0, observer.close)
    middleware = observer.tracing.middleware if observer.tracing else None
    return server, middleware, _every(finish), _every(shutdown)


def _sink_counts(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=10) as r:
        counts: dict[str, int] = json.loads(r.read())
    return counts


def otlp_costs(jobs: int, runs: int) -> dict[str, Any]:
    """CPU per attempt of each OTLP_CONFIGS entry (median of ``runs`` interleaved
    batches of ``jobs`` attempts), the sink's counts, and the differences that answer
    the questions: what an unsampled and a sampled attempt add to the metrics-only
    attempt, what exporting one span costs, what metrics over OTLP add."""
    import logging
    import os
    import platform
    import subprocess
    import time

    from opentelemetry.sdk.version import __version__ as sdk_version

    logging.getLogger("kilnotel.counts").setLevel(logging.ERROR)  # no database here
    # a queue that holds every span of a batch: attempts back to back give the export
    # thread few turns at the GIL, and a dropped span would be a span not paid for
    queue_before = os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE")
    os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(max(2 * jobs, 2048))
    proc = subprocess.Popen([sys.executable, "-m", "bench.bench_otel_cost", "--sink"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    port = int(proc.stdout.readline())
    endpoint = f"http://127.0.0.1:{port}"
    times: dict[str, list[float]] = {name: [] for name, _m, _t in OTLP_CONFIGS}
    received: dict[str, list[int]] = {name: [] for name, _m, _t in OTLP_CONFIGS}
    wall = time.monotonic()
    try:
        for run in range(runs):
            order = OTLP_CONFIGS if run % 2 == 0 else tuple(reversed(OTLP_CONFIGS))
            for name, metrics, tracing in order:
                server, middleware, finish, shutdown = _otlp_setup(metrics, tracing, endpoint)
                rows = _rows(jobs)
                before = _sink_counts(port)
                cpu = time.process_time()
                asyncio.run(_attempts(server, middleware, rows))
                finish()
                times[name].append((time.process_time() - cpu) / jobs * 1e6)
                after = _sink_counts(port)
                received[name].append(after["spans"] - before["spans"])
                shutdown()
    finally:
        proc.stdin.close()
        proc.wait(10)
        proc.stdout.close()
        if queue_before is None:
            del os.environ["OTEL_BSP_MAX_QUEUE_SIZE"]
        else:
            os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = queue_before
    med = {name: statistics.median(t) for name, t in times.items()}

    def diff(a: str, b: str) -> float:
        return round(med[a] - med[b], 2)

    exported = statistics.median(received["sampled_exported"])
    return {
        "bench": "otel_cost --otlp",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "commit": _commit(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "opentelemetry_sdk": sdk_version,
        "protobuf": _version("protobuf"),
        "opentelemetry_exporter_otlp_proto_http": _version(
            "opentelemetry-exporter-otlp-proto-http"),
        "jobs": jobs, "runs": runs, "seconds": round(time.monotonic() - wall, 1),
        "us_per_attempt": {name: round(v, 2) for name, v in med.items()},
        "spans_received_per_batch": {name: statistics.median(r)
                                     for name, r in received.items() if max(r) > 0},
        "spans_expected_per_batch": {"sampled_exported": jobs},
        "us_added": {
            "metrics_prometheus_over_none": diff("metrics_prometheus", "none"),
            "metrics_otlp_over_none": diff("metrics_otlp", "none"),
            "noop_tracer_over_metrics": diff("noop_tracer", "metrics_prometheus"),
            "unsampled_over_metrics": diff("unsampled", "metrics_prometheus"),
            "unsampled_over_noop_tracer": diff("unsampled", "noop_tracer"),
            "ratio_0.1_over_metrics": diff("ratio_0.1", "metrics_prometheus"),
            "sampled_exported_over_metrics": diff("sampled_exported", "metrics_prometheus"),
            "sampled_not_exported_over_metrics": diff("sampled_discarded",
                                                      "metrics_prometheus"),
            "per_exported_span": (round((med["sampled_exported"] - med["sampled_discarded"])
                                        * jobs / exported, 2) if exported else None),
        },
        "metrics_otlp_vs_prometheus_ratio": (
            round((med["metrics_otlp"] - med["none"])
                  / (med["metrics_prometheus"] - med["none"]), 1)
            if med["metrics_prometheus"] > med["none"] else None),
    }


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def _commit() -> str:
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, cwd=Path(__file__).parent, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()



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
    parser.add_argument("--otlp", action="store_true",
                        help="no database: per attempt and per exported span, with the "
                             "real OTLP exporters against a sink on loopback")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "otel_cost.json",
                        help="where --otlp writes its JSON (default: bench/otel_cost.json)")
    parser.add_argument("--sink", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sink:
        sink()
        return
    if args.otlp:
        result = otlp_costs(args.jobs, args.runs)
        text = json.dumps(result, indent=2)
        args.out.write_text(text + "\n")
        print(text)
        return
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
        return round(float(statistics.median(r[mode][key] for r in runs)), 4)

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
