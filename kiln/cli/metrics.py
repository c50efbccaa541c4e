"""The hook from the CLI to kilnotel: serve a server's metrics for Prometheus, and
export them and its spans over OTLP.

kilnotel is an optional extra and the core never imports it, so it is imported
here lazily, only when a metrics port or OTLP export is asked for.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Mapping
from typing import Any

from kiln._errors import KilnError
from kiln._server import JobContextFilter, formatter

INSTALL_HINT = "install the otel extra: pip install 'kiln-jobs[otel]'"


class MetricsUnavailableError(KilnError):
    """--metrics-port was given but kilnotel (or its serve function) is missing."""


def load_kilnotel(what: str = "metrics") -> Any:
    """The kilnotel module, or MetricsUnavailableError saying ``what`` needs it."""
    try:
        return importlib.import_module("kilnotel")
    except ImportError as exc:
        raise MetricsUnavailableError(f"{what} need(s) kilnotel ({exc}): {INSTALL_HINT}"
                                      ) from exc


def load_serve() -> Any:
    """kilnotel.serve, or MetricsUnavailableError saying what is missing."""
    kilnotel = load_kilnotel()
    serve = getattr(kilnotel, "serve", None)
    if serve is None:
        raise MetricsUnavailableError(
            "this kilnotel has no serve(server, port=..., host=...): metrics are not available"
        )
    return serve


async def serve_metrics(
    server: Any, port: int, host: str, *, cardinality_limit: int | None = None
) -> Any:
    """Start the /metrics endpoint for ``server``; returns what kilnotel.serve returned.

    Any import error of the OpenTelemetry packages becomes MetricsUnavailableError.
    """
    serve = load_serve()
    options = {} if cardinality_limit is None else {"cardinality_limit": cardinality_limit}
    try:
        handle = serve(server, port=port, host=host, **options)
        if inspect.isawaitable(handle):
            handle = await handle
    except ImportError as exc:
        raise MetricsUnavailableError(
            f"metrics need OpenTelemetry ({exc}): {INSTALL_HINT}"
        ) from exc
    except ValueError as exc:  # a setting kilnotel refuses, named in the message
        raise MetricsUnavailableError(str(exc)) from exc
    return handle


# the standard variables that ask for OTLP export (kilnotel._otlp.ENDPOINT_VARIABLES)
OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                           "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")


def otlp_requested(endpoint: str | None, environ: Mapping[str, str]) -> bool:
    """``--otlp-endpoint`` was given, or an OTLP endpoint variable is set (and
    OTEL_SDK_DISABLED is not true)."""
    if endpoint is not None:
        return True
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in OTLP_ENDPOINT_VARIABLES)


def load_export_otlp() -> Any:
    """kilnotel.export_otlp, or MetricsUnavailableError saying what is missing."""
    try:
        kilnotel = importlib.import_module("kilnotel")
    except ImportError as exc:
        raise MetricsUnavailableError(f"OTLP export needs kilnotel ({exc}): {INSTALL_HINT}"
                                      ) from exc
    export = getattr(kilnotel, "export_otlp", None)
    if export is None:
        raise MetricsUnavailableError("this kilnotel has no export_otlp(): OTLP export is "
                                      "not available")
    return export


def export_otlp(
    server: Any, endpoint: str | None, metrics_port: int | None, host: str,
    **options: Any,
) -> Any:
    """Observe ``server`` with kilnotel's OTLP providers (and serve /metrics when
    ``metrics_port`` is given); returns kilnotel's handle. ``options`` go to
    kilnotel.export_otlp as they are (cardinality_limit=...), those that are None left
    out. A missing exporter package or a setting kilnotel cannot honour becomes
    MetricsUnavailableError naming it."""
    export = load_export_otlp()
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return export(server, endpoint, metrics_port=metrics_port, metrics_host=host,
                      global_tracer=True, **given)
    except ImportError as exc:
        raise MetricsUnavailableError(f"OTLP export needs OpenTelemetry ({exc}): "
                                      f"{INSTALL_HINT}") from exc
    except ValueError as exc:  # kilnotel's OtlpConfigError
        raise MetricsUnavailableError(str(exc)) from exc


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
