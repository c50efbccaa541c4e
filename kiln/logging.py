"""kiln's logging API: the job and the trace on every line, and the worker's formats.

    import logging, kiln.logging

    handler = logging.StreamHandler()
    handler.addFilter(kiln.logging.JobContextFilter())    # job_id, job_kind, queue, attempt
    handler.addFilter(kiln.logging.TraceContextFilter())  # trace_id, span_id, trace_sampled
    handler.setFormatter(kiln.logging.JsonFormatter())    # one JSON object per line
    logging.basicConfig(level=logging.INFO, handlers=[handler])

``kiln worker --log-format json|text`` sets these up itself. The JSON formatter keeps
the ``extra=`` fields of every call and adds the server id and whether the trace is
sampled. TraceContextFilter reads the span of the trace source that kilnotel registers
when imported (``kiln worker`` imports it with its telemetry; otherwise import kilnotel,
or register your own with ``use_trace_source``); the core never imports OpenTelemetry.

The worker's own lines about its jobs come from loggers under ``kiln.jobs``
(``kiln.jobs.retry``, ``.failed``, ``.rescued``, ``.handed_back``, ``.cancelled``,
``.reconciled``) and ``kiln.server.shutdown``, at INFO: tune each with its logger's level.
"""

from kiln._server import (
    JobContextFilter,
    JsonFormatter,
    TextFormatter,
    TraceContextFilter,
    use_trace_source,
)

__all__ = [
    "JobContextFilter",
    "JsonFormatter",
    "TextFormatter",
    "TraceContextFilter",
    "use_trace_source",
]
