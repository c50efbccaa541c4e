"""The job an attempt runs, on every log line written while it runs; and the log formats
of ``kiln worker`` (text, or one JSON object per line).

The executor sets ``CURRENT_JOB`` in the task of each attempt (the thread of a plain def
handler gets a copy of the task's context), so a log call anywhere under the handler,
kiln's own included, can say which job it is about. ``JobContextFilter`` copies the job
onto the record (``job_id``, ``job_kind``, ``queue``, ``attempt``); other filters may
add ``trace_id`` and ``span_id`` (kilnotel's TraceContextFilter does); both formatters
print whichever of those a record has. The core never imports OpenTelemetry.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from kiln._job import JobRow

CURRENT_JOB: ContextVar[JobRow | None] = ContextVar("kiln_current_job", default=None)
CONTEXT_FIELDS = ("job_id", "job_kind", "queue", "attempt", "trace_id", "span_id")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JobContextFilter(logging.Filter):
    """Adds the current attempt's job to the record; lets every record through."""

    def filter(self, record: logging.LogRecord) -> bool:
        row = CURRENT_JOB.get()
        if row is not None and not hasattr(record, "job_id"):
            record.job_id = row.id
            record.job_kind = row.kind
            record.queue = row.queue
            record.attempt = row.attempt
        return True


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {f: getattr(record, f) for f in CONTEXT_FIELDS if getattr(record, f, None) is not None}


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
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, the job
    and trace context when known, and the exception's traceback as one string."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_context(record),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def formatter(name: str) -> logging.Formatter:
    if name == "json":
        return JsonFormatter()
    if name == "text":
        return TextFormatter()
    raise ValueError(f"log format must be 'text' or 'json', got {name!r}")
