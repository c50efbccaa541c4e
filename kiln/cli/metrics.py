"""The hook from the CLI to kilnotel: serve a server's metrics for Prometheus.

kilnotel is an optional extra and the core never imports it, so it is imported
here lazily, only when a metrics port is asked for.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from typing import Any

from kiln._errors import KilnError
from kiln._logs import JobContextFilter, formatter

INSTALL_HINT = "install the otel extra: pip install 'kiln-jobs[otel]'"


class MetricsUnavailableError(KilnError):
    """--metrics-port was given but kilnotel (or its serve function) is missing."""


def load_serve() -> Any:
    """kilnotel.serve, or MetricsUnavailableError saying what is missing."""
    try:
        kilnotel = importlib.import_module("kilnotel")
    except ImportError as exc:
        raise MetricsUnavailableError(f"metrics need kilnotel ({exc}): {INSTALL_HINT}") from exc
    serve = getattr(kilnotel, "serve", None)
    if serve is None:
        raise MetricsUnavailableError(
            "this kilnotel has no serve(server, port=..., host=...): metrics are not available"
        )
    return serve


async def serve_metrics(server: Any, port: int, host: str) -> Any:
    """Start the /metrics endpoint for ``server``; returns what kilnotel.serve returned.

    Any import error of the OpenTelemetry packages becomes MetricsUnavailableError.
    """
    serve = load_serve()
    try:
        handle = serve(server, port=port, host=host)
        if inspect.isawaitable(handle):
            handle = await handle
    except ImportError as exc:
        raise MetricsUnavailableError(
            f"metrics need OpenTelemetry ({exc}): {INSTALL_HINT}"
        ) from exc
    return handle


async def stop_metrics(handle: Any) -> None:
    """Stop what ``serve_metrics`` started, if it offers a way to."""
    for name in ("aclose", "close", "stop", "shutdown"):
        method = getattr(handle, name, None)
        if callable(method):
            result = method()
            if inspect.isawaitable(result):
                await result
            return


def trace_filter() -> logging.Filter | None:
    """kilnotel's TraceContextFilter, or None when kilnotel is not installed."""
    try:
        kilnotel = importlib.import_module("kilnotel")
    except ImportError:
        return None
    found = getattr(kilnotel, "TraceContextFilter", None)
    return found() if found is not None else None


def configure_logs(log_format: str, *, traces: bool) -> None:
    """Every handler of the root logger prints the job (and, with ``traces``, the trace
    ids through kilnotel) in ``log_format`` ("text" or "json")."""
    extra = trace_filter() if traces else None
    for handler in logging.getLogger().handlers:
        handler.addFilter(JobContextFilter())
        if extra is not None:
            handler.addFilter(extra)
        handler.setFormatter(formatter(log_format))
