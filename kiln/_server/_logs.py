"""The job an attempt runs, on every log line written while it runs; and the log formats
of ``kiln worker`` (text, or one JSON object per line).

The executor sets ``CURRENT_JOB`` in the task of each attempt (the thread of a plain def
handler gets a copy of the task's context), so a log call anywhere under the handler,
kiln's own included, can say which job it is about. ``JobContextFilter`` copies the job
onto the record (``job_id``, ``job_kind``, ``queue``, ``attempt``, ``server_id``);
``TraceContextFilter`` adds ``trace_id``, ``span_id`` and ``trace_sampled`` from the
trace source kilnotel registers when it is imported (``use_trace_source``: the core
never imports OpenTelemetry); both formatters print whichever of those a record has,
and the JSON one every ``extra=`` field of the call too. Published as ``kiln.logging``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from kiln._model._job import JobRow

CURRENT_JOB: ContextVar[JobRow | None] = ContextVar("kiln_current_job", default=None)
TEXT_FIELDS = ("job_id", "job_kind", "queue", "attempt", "trace_id", "span_id")
CONTEXT_FIELDS = (*TEXT_FIELDS, "trace_sampled", "server_id")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# what a LogRecord has of its own: anything else on it came from extra= (or a filter)
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message", "asctime", "taskName"}
# (trace id, span id, sampled) of the current span, or None: kilnotel's, once imported
TraceSource = Callable[[], tuple[str, str, bool] | None]
_TRACE_SOURCES: list[TraceSource] = []


def use_trace_source(source: TraceSource) -> None:
    """Where TraceContextFilter reads the current trace from (kilnotel registers its
    own when imported; a tracing library of your own can too)."""
    _TRACE_SOURCES[:] = [source]


class JobContextFilter(logging.Filter):
    """Adds the current attempt's job (and the server running it) to the record; lets
    every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        row = CURRENT_JOB.get()
        if row is not None and not hasattr(record, "job_id"):
            record.job_id = row.id
            record.job_kind = row.kind
            record.queue = row.queue
            record.attempt = row.attempt
            record.server_id = row.server_id
        return True


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id``, ``span_id`` and ``trace_sampled`` (whether the trace is
    exported: under sampling most are not) of the span current when the line is logged,
    from the registered trace source; lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _TRACE_SOURCES and not hasattr(record, "trace_id"):
            ids = _TRACE_SOURCES[0]()
            if ids is not None:
                record.trace_id, record.span_id, record.trace_sampled = ids
        return True


def _context(record: logging.LogRecord, fields: tuple[str, ...] = TEXT_FIELDS
             ) -> dict[str, Any]:
    return {f: getattr(record, f) for f in fields if getattr(record, f, None) is not None}


class TextFormatter(logging.Formatter):
    """The usual line, then ``[job_id=12 job_kind=mail.send ... trace_id=...]`` when known."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = _context(record)
        if not context:
            return line
        head, sep, rest = line.partition("\n")  # a traceback stays below the context
        tags = " ".join(f"{k}={v}" for k, v in context.items())
        return f"{head} [{tags}]{sep}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the job,
    server and trace context when known (with ``trace_sampled``), every ``extra=`` field
    of the call, and the exception's traceback as one string."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record, CONTEXT_FIELDS),
        }
        for key, value in vars(record).items():  # the user's extra= fields
            if key not in _STANDARD and key not in out and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def formatter(name: str) -> logging.Formatter:
    if name == "json":
        return JsonFormatter()
    if name == "text":
        return TextFormatter()
    raise ValueError(f"log format must be 'text' or 'json', got {name!r}")
