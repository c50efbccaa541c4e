"""Trace context on log records: the ids of the span current when a line is logged.

``TraceContextFilter`` sets ``trace_id`` (32 hex digits), ``span_id`` (16) and
``trace_sampled`` (whether the trace is exported: under sampling most are not) on every
record logged inside a recording or sampled-out span with a valid context (a job's
``process`` span, a request's span), which kiln's formatters (``kiln worker
--log-format``) and any ``%(trace_id)s`` format print. It reads the current context
only: no I/O, no lock. Importing kilnotel also registers ``current_ids`` as the trace
source of ``kiln.logging.TraceContextFilter``, which the core offers without importing
OpenTelemetry.
"""

from __future__ import annotations

import logging

from opentelemetry import trace

import kiln.logging


def current_ids() -> tuple[str, str, bool] | None:
    """(trace id, span id, sampled) of the current span, or None without a valid one."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return (f"{context.trace_id:032x}", f"{context.span_id:016x}",
            bool(context.trace_flags.sampled))


class TraceContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            ids = current_ids()
            if ids is not None:
                record.trace_id, record.span_id, record.trace_sampled = ids
        return True


kiln.logging.use_trace_source(current_ids)
