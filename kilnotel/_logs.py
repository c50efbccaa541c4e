"""Trace context on log records: the ids of the span current when a line is logged.

``TraceContextFilter`` sets ``trace_id`` (32 hex digits) and ``span_id`` (16) on every
record logged inside a recording or sampled-out span with a valid context (a job's
``process`` span, a request's span), which kiln's formatters (``kiln worker
--log-format``) and any ``%(trace_id)s`` format print. It reads the current context
only: no I/O, no lock.
"""

from __future__ import annotations

import logging

from opentelemetry import trace


class TraceContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        context = trace.get_current_span().get_span_context()
        if context.is_valid and not hasattr(record, "trace_id"):
            record.trace_id = f"{context.trace_id:032x}"
            record.span_id = f"{context.span_id:016x}"
        return True
