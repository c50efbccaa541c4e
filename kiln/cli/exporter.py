"""``kiln exporter``: publish one installation's queue state for Prometheus from a small
process that runs no worker, until SIGTERM or SIGINT.

Every --counts-ttl seconds it reads, per queue, the jobs by state, the scheduled jobs
that fell due, the oldest available job's age, whether the queue is paused and how many
live servers serve it (kilnotel.QueueExporter), and serves them on /metrics. With it,
"work is waiting and no healthy worker serves it" is alerted on when no worker runs at
all, and an autoscaler (KEDA) can scale workers from zero on the backlog. kilnotel is
imported lazily, as for ``kiln worker --metrics-port``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from typing import Any

from kiln._client._client import Client
from kiln._errors import ConfigError
from kiln._server import run_in_new_loop
from kiln.cli._database import opened, url_of
from kiln.cli.metrics import INSTALL_HINT, MetricsUnavailableError, load_kilnotel

log = logging.getLogger("kiln.exporter")
DEFAULT_PORT = 9465  # beside the workers' 9464


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "exporter", parents=[common], help="publish the queues' state for Prometheus",
        description="Serve /metrics with the state of every queue of the database (jobs by "
        "state, scheduled jobs due, oldest available age, paused, live servers serving it), "
        "read every --counts-ttl seconds, whether or not any worker runs. One small process "
        "per installation; it needs the otel extra.",
    )
    parser.add_argument("--port", type=int, default=None, metavar="PORT",
                        help=f"metrics port ($KILN_EXPORTER_PORT; default {DEFAULT_PORT})")
    parser.add_argument("--host", default=None, metavar="HOST",
                        help="address to listen on ($KILN_EXPORTER_HOST; default 127.0.0.1)")
    parser.add_argument("--queue", action="append", default=[], metavar="NAME",
                        help="a queue to report at 0 even before it has jobs or servers "
                        "(repeatable; the queues seen in the database are reported anyway)")
    parser.add_argument("--counts-ttl", type=float, default=5.0, metavar="SECONDS",
                        help="seconds between two reads of the database (default 5)")
    parser.add_argument("--stale-after", type=float, default=30.0, metavar="SECONDS",
                        help="a server whose heartbeat is older no longer counts as serving "
                        "its queues (default 30)")
    parser.add_argument("--log-level", default=os.environ.get("KILN_LOG_LEVEL", "info"),
                        choices=("debug", "info", "warning", "error"), help="default: info")
    parser.set_defaults(func=run)


def _port(value: int | None, environ: Mapping[str, str]) -> int:
    if value is None and "KILN_EXPORTER_PORT" in environ:
        try:
            value = int(environ["KILN_EXPORTER_PORT"])
        except ValueError:
            raise ConfigError("KILN_EXPORTER_PORT", environ["KILN_EXPORTER_PORT"],
                              "must be a port number") from None
    return DEFAULT_PORT if value is None else value


def run(args: argparse.Namespace) -> int:
    for name in ("counts_ttl", "stale_after"):
        if not getattr(args, name) > 0:
            raise ConfigError(f"--{name.replace('_', '-')}", getattr(args, name),
                              "must be a positive number of seconds")
    kilnotel = load_kilnotel("kiln exporter")
    if getattr(kilnotel, "QueueExporter", None) is None:
        raise MetricsUnavailableError(f"this kilnotel has no QueueExporter: {INSTALL_HINT}")
    environ = os.environ
    host = args.host or environ.get("KILN_EXPORTER_HOST", "127.0.0.1")
    run_in_new_loop(serve(kilnotel, url_of(args), _port(args.port, environ), host, args))
    return 0


async def serve(kilnotel: Any, url: str, port: int, host: str,
                args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    async with opened(url) as store:
        provider, registry = kilnotel.prometheus_provider()
        exporter = kilnotel.QueueExporter(
            Client(store, {}), provider, queues=args.queue, counts_ttl=args.counts_ttl,
            stale_after=args.stale_after)
        metrics = kilnotel.serve(registry, port=port, host=host)
        log.info("kiln exporter: metrics on %s, read every %gs", metrics.url, args.counts_ttl)
        try:
            await exporter.run(stop)
        finally:
            metrics.close()
            exporter.close()
            provider.shutdown()
    log.info("kiln exporter stopped")
