"""``kiln demo``: the self-contained example, with its dashboard and metrics when installed.

Owns the demo's arguments and the optional pieces around kiln.cli._demo_app: the
dashboard (kiln.web.create_app served by uvicorn in its own thread, so its loop
and signal handling stay apart from the worker's) and the metrics endpoint
(kilnotel.serve). A missing piece is reported and skipped, never fatal.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from typing import Any

from kiln._app import App
from kiln.cli import _demo_app
from kiln.cli._argparse import UsageError
from kiln.cli._database import explicit_url
from kiln.cli.metrics import MetricsUnavailableError, serve_metrics, stop_metrics


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "demo", parents=[common], help="run a self-contained example with live output",
        description="Run a worker with a few demo job kinds on sqlite:///kiln-demo.db in the "
        "working directory (created and migrated if needed), enqueue a steady trickle of "
        "jobs and print a summary every few seconds. Ctrl-C stops it.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address for the dashboard "
                        "and metrics (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="dashboard port (default 8000)")
    parser.add_argument("--metrics-port", type=int, default=9464,
                        help="Prometheus /metrics port (default 9464)")
    parser.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                        help="stop after this long (default: run until Ctrl-C)")
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between summary lines (default 2)")
    parser.add_argument("--rate", type=float, default=5.0, metavar="JOBS_PER_SECOND",
                        help="jobs enqueued per second (default 5)")
    parser.set_defaults(func=run, log_level="warning")


def say(line: str) -> None:
    print(line, flush=True)


class Dashboard:
    """kiln.web's ASGI app under uvicorn in a daemon thread."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self.server = server
        self.thread = thread

    @classmethod
    def start(cls, app: App, host: str, port: int) -> Dashboard:
        import uvicorn

        from kiln.web import create_app
        from kiln.web._serve import app_options, check_exposure, listen_hosts

        options = app_options({})  # credentials from the environment, as `kiln dashboard`
        check_exposure(host, options["token"], options["basic_auth"], options["tokens"])
        options["allowed_hosts"] = listen_hosts(host, ())
        # proxy_headers off: uvicorn would otherwise believe X-Forwarded-* from loopback
        config = uvicorn.Config(create_app(app, **options), host=host, port=port,
                                log_level="warning", lifespan="on", proxy_headers=False)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, name="kiln-demo-dashboard", daemon=True)
        thread.start()
        deadline = time.monotonic() + 10.0
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not server.started:
            server.should_exit = True
            raise OSError(f"the dashboard did not start on {host}:{port}")
        return cls(server, thread)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5.0)


def _dashboard(app: App, host: str, port: int) -> Dashboard | None:
    try:
        dashboard = Dashboard.start(app, host, port)
    except ImportError as exc:
        say(f"  dashboard: not available ({exc}); pip install -e '.[web]'")
        return None
    except OSError as exc:
        say(f"  dashboard: {exc}")
        return None
    say(f"  dashboard: http://{host}:{port}/")
    return dashboard


def run(args: argparse.Namespace) -> int:
    for flag in ("duration", "interval", "rate"):
        value = getattr(args, flag)
        if value is not None and not value > 0:
            raise UsageError(f"kiln demo: --{flag} must be positive, got {value:g}")
    url = explicit_url(args) or _demo_app.DEMO_URL
    app = _demo_app.build_app(url)
    applied = app.migrate()
    say(f"kiln demo on {url}" + (f" (migrated to {applied[-1]})" if applied else ""))
    server = app.server(queues=_demo_app.QUEUES, config=_demo_app.CONFIG)
    queues = ", ".join(f"{q}={n}" for q, n in _demo_app.QUEUES.items())
    say(f"  worker: {len(app.kinds)} kinds ({', '.join(app.kinds)}) on queues {queues}")
    dashboard = _dashboard(app, args.host, args.port)
    try:
        asyncio.run(_run(app, server, args))
    finally:
        if dashboard is not None:
            dashboard.stop()
    return 0


async def _run(app: App, server: Any, args: argparse.Namespace) -> None:
    metrics: Any = None
    try:
        metrics = await serve_metrics(server, args.metrics_port, args.host)
        url = getattr(metrics, "url", None) or f"http://{args.host}:{args.metrics_port}/metrics"
        say(f"  metrics:   {url}")
    except MetricsUnavailableError as exc:
        say(f"  metrics:   not available ({exc})")
    except OSError as exc:
        say(f"  metrics:   could not listen on {args.host}:{args.metrics_port} ({exc})")
    stop_hint = "Ctrl-C stops it" if args.duration is None else f"runs {args.duration:g}s"
    say(f"  {stop_hint}; jobs still running then are handed back. Summary every "
        f"{args.interval:g}s:")
    try:
        await _demo_app.run(app, server, duration=args.duration, interval=args.interval,
                        per_second=args.rate, write=say)
    finally:
        if metrics is not None:
            await stop_metrics(metrics)
