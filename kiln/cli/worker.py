"""``kiln worker APP``: run a server for the job kinds of a kiln.App until SIGTERM/SIGINT.

APP is ``module:attribute`` (the working directory is importable, as with uvicorn).
Every ServerConfig field is a flag and an environment variable (see _server_config).
``--health-port`` serves /healthz and /stats; ``--metrics-port`` hands the server to
kilnotel.serve; ``--otlp-endpoint`` (or the standard OTEL_EXPORTER_OTLP_* variables)
exports its metrics and spans over OTLP through kilnotel. The exit code is 0 after a
graceful shutdown.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from kiln._app import App
from kiln._errors import ConfigError
from kiln._server import Server, ServerStats, run_in_new_loop
from kiln.cli._argparse import UsageError
from kiln.cli._database import explicit_url
from kiln.cli._server_config import add_flags, config_from
from kiln.cli.health import HealthServer
from kiln.cli.metrics import (
    configure_logs,
    export_otlp,
    load_export_otlp,
    load_serve,
    otlp_requested,
    serve_metrics,
    stop_metrics,
)
from kiln.stores import store_from_url, with_bus

log = logging.getLogger("kiln.worker")
DEFAULT_CONCURRENCY = 10


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "worker", parents=[common], help="run a worker for an app's job kinds",
        description="Run a server for the job kinds of a kiln.App until SIGTERM or SIGINT "
        "(a second signal skips the wait for running jobs). --database-url, when given, "
        "overrides the app's own URL.",
    )
    parser.add_argument("app", metavar="APP", help="module:attribute naming a kiln.App")
    parser.add_argument(
        "--queue", action="append", default=[], type=parse_queue, metavar="NAME[=CONCURRENCY]",
        help=f"a queue to work on, repeatable (concurrency default {DEFAULT_CONCURRENCY}); "
        "default: every queue the app's kinds name",
    )
    parser.add_argument("--health-port", type=int, default=None, metavar="PORT",
                        help="serve /healthz and /stats on this port ($KILN_HEALTH_PORT)")
    parser.add_argument("--health-host", default=None, metavar="HOST",
                        help="address for the health port ($KILN_HEALTH_HOST; default 127.0.0.1)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="PORT",
                        help="serve Prometheus /metrics through kilnotel ($KILN_METRICS_PORT)")
    parser.add_argument("--metrics-host", default=None, metavar="HOST",
                        help="address for the metrics port ($KILN_METRICS_HOST; "
                        "default 127.0.0.1)")
    parser.add_argument("--otlp-endpoint", default=None, metavar="URL",
                        help="export metrics and traces over OTLP to this collector base "
                        "URL (http://127.0.0.1:4318); without it, OTLP export is on when "
                        "OTEL_EXPORTER_OTLP_ENDPOINT (or a per-signal one) is set, and "
                        "every OTEL_EXPORTER_OTLP_* variable applies")
    parser.add_argument("--metrics-cardinality-limit", type=int, default=None, metavar="N",
                        help="series each metric keeps before folding the rest into one "
                        "otel_metric_overflow series ($KILN_METRICS_CARDINALITY_LIMIT; "
                        "default 2000)")
    parser.add_argument("--trace-sample-ratio", type=float, default=None, metavar="RATIO",
                        help="with OTLP export: the share of attempts traced, besides every "
                        "attempt whose enqueuing request was traced "
                        "($KILN_TRACE_SAMPLE_RATIO; default 0.1; OTEL_TRACES_SAMPLER, when "
                        "set, wins)")
    parser.add_argument("--log-level", default=os.environ.get("KILN_LOG_LEVEL", "info"),
                        choices=("debug", "info", "warning", "error"), help="default: info")
    parser.add_argument("--log-format", default=os.environ.get("KILN_LOG_FORMAT", "text"),
                        choices=("text", "json"),
                        help="text lines or one JSON object per line ($KILN_LOG_FORMAT; "
                        "default text); both carry the job, and the trace when kilnotel "
                        "traces it")
    add_flags(parser)
    parser.set_defaults(func=run)


def parse_queue(text: str) -> tuple[str, int]:
    name, sep, number = text.partition("=")
    if not name.strip():
        raise argparse.ArgumentTypeError(f"queue name missing in {text!r}")
    if not sep:
        return name, DEFAULT_CONCURRENCY
    try:
        concurrency = int(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"concurrency of {name!r} must be a number") from None
    if concurrency < 1:
        raise argparse.ArgumentTypeError(f"concurrency of {name!r} must be at least 1")
    return name, concurrency


def load_app(spec: str) -> App:
    """Import ``module:attribute`` and check that it names a kiln.App."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise UsageError(f"APP must look like module:attribute, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise UsageError(f"cannot import {module_name!r}: no such module") from exc
        raise
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UsageError(f"module {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not isinstance(target, App):
        raise UsageError(f"{spec} is a {type(target).__name__}, not a kiln.App")
    return target


def _port(value: int | None, env: str, environ: Mapping[str, str]) -> int | None:
    if value is not None:
        return value
    if env not in environ:
        return None
    try:
        return int(environ[env])
    except ValueError:
        raise ConfigError(env, environ[env], "must be a port number") from None


def _positive(value: int | None, env: str, environ: Mapping[str, str]) -> int | None:
    if value is None and env in environ:
        try:
            value = int(environ[env])
        except ValueError:
            raise ConfigError(env, environ[env], "must be a whole number") from None
    if value is not None and value < 1:
        raise ConfigError(env.removeprefix("KILN_").lower(), value, "must be at least 1")
    return value


DEFAULT_TRACE_SAMPLE_RATIO = 0.1


def _ratio(value: float | None, environ: Mapping[str, str]) -> float:
    """--trace-sample-ratio, else $KILN_TRACE_SAMPLE_RATIO, else 0.1 (between 0 and 1)."""
    env = "KILN_TRACE_SAMPLE_RATIO"
    if value is None and environ.get(env, "").strip():
        try:
            value = float(environ[env])
        except ValueError:
            raise ConfigError(env, environ[env], "must be a number between 0 and 1") from None
    ratio = DEFAULT_TRACE_SAMPLE_RATIO if value is None else value
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError("trace_sample_ratio", ratio, "must be between 0 and 1")
    return ratio


def build_server(args: argparse.Namespace, environ: Mapping[str, str]) -> Server:
    config = config_from(args, environ)
    app = load_app(args.app)
    queues = dict(args.queue) or None
    url = explicit_url(args)
    if url is None:
        return app.server(queues=queues, config=config)
    if queues is None:
        queues = {k.queue: DEFAULT_CONCURRENCY for k in app.kinds.values()} or {"default": 10}
    store = store_from_url(url, **(with_bus(url, {}) if app.bus is not None else {}))
    return Server(store, app.kinds, queues, config, bus=app.bus,
                  middleware=app.middleware, recurring=app.recurring)


def run(args: argparse.Namespace) -> int:
    environ = os.environ
    health_port = _port(args.health_port, "KILN_HEALTH_PORT", environ)
    metrics_port = _port(args.metrics_port, "KILN_METRICS_PORT", environ)
    otlp = otlp_requested(args.otlp_endpoint, environ)
    limit = _positive(args.metrics_cardinality_limit, "KILN_METRICS_CARDINALITY_LIMIT", environ)
    ratio = _ratio(args.trace_sample_ratio, environ)
    server = build_server(args, environ)
    if otlp:
        load_export_otlp()  # fail before starting anything when kilnotel is missing
    elif metrics_port is not None:
        load_serve()
    configure_logs(args.log_format, traces=metrics_port is not None or otlp or any(
        k.startswith("OTEL_") for k in environ))
    hosts = (args.health_host or environ.get("KILN_HEALTH_HOST", "127.0.0.1"),
             args.metrics_host or environ.get("KILN_METRICS_HOST", "127.0.0.1"))
    # not asyncio.run: it waits for every task it cancels at exit, so a handler that
    # swallows its cancellation would hold the process long after its job was handed back
    run_in_new_loop(serve(server, health_port, metrics_port, hosts,
                          otlp=(args.otlp_endpoint,) if otlp else None,
                          cardinality_limit=limit, sample_ratio=ratio))
    return 0


async def serve(
    server: Server, health_port: int | None, metrics_port: int | None, hosts: tuple[str, str],
    *, otlp: tuple[str | None] | None = None, cardinality_limit: int | None = None,
    sample_ratio: float | None = None,
) -> None:
    """Run ``server`` with its optional health and metrics endpoints around it; ``otlp``
    (a one-tuple of the endpoint, None for the environment's) exports over OTLP;
    ``cardinality_limit`` is kilnotel's series limit per instrument."""
    health: HealthServer | None = None
    metrics: Any = None
    try:
        if health_port is not None:
            health = HealthServer(server, health_port, hosts[0])
            await health.start()
            log.info("health on http://%s:%d/healthz and /stats", hosts[0], health.port)
        if otlp is not None:
            metrics = export_otlp(server, otlp[0], metrics_port, hosts[1],
                                  cardinality_limit=cardinality_limit,
                                  sample_ratio=sample_ratio)
            log.info("OTLP export to %s", otlp[0] or "the OTEL_EXPORTER_OTLP_* endpoint")
            if metrics_port is not None:
                log.info("metrics on %s", _metrics_url(metrics, hosts[1], metrics_port))
        elif metrics_port is not None:
            metrics = await serve_metrics(server, metrics_port, hosts[1],
                                          cardinality_limit=cardinality_limit)
            log.info("metrics on %s", _metrics_url(metrics, hosts[1], metrics_port))
        await server.run()
    finally:
        if metrics is not None:
            await stop_metrics(metrics)
        if health is not None:
            await health.stop()
    log.info("server %s stopped: %s", server.id, _summary(server.stats()))


def _metrics_url(handle: Any, host: str, port: int) -> str:
    url = getattr(handle, "url", None)
    return str(url) if url else f"http://{host}:{port}/metrics"


def _summary(stats: ServerStats) -> str:
    keys = ("completed", "retried", "failed", "cancelled", "snoozed", "handed_back")
    return ", ".join(f"{k} {getattr(stats, k)}" for k in keys)
