"""How the CLI prints jobs and servers: plain text for people, JSON for scripts."""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Sequence
from datetime import UTC
from typing import Any

from kiln._model._job import JobRow
from kiln._model._printable import printable as printable  # shared with kiln.web
from kiln._model._wire import job_json


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def json_line(value: Any) -> str:
    """``value`` as one line of JSON Lines (no newline inside it)."""
    return json.dumps(value, separators=(",", ":"), default=str) + "\n"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces; the last column is not padded.
    Cells come from job data: control characters are escaped, never printed."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *rows]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def short(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def job_line(row: JobRow) -> list[str]:
    error = row.last_error
    return [
        str(row.id),
        row.state.value,
        row.queue,
        row.kind,
        f"{row.attempt}/{row.max_attempts}",
        row.run_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
        short(error.error) if error else "",
    ]


JOB_HEADERS = ("ID", "STATE", "QUEUE", "KIND", "ATTEMPT", "RUN_AT (UTC)", "LAST ERROR")


def job_details(row: JobRow) -> str:
    data = job_json(row)
    errors = data.pop("errors")
    width = max(len(k) for k in data)
    lines = []
    for key, value in data.items():
        shown = json.dumps(value) if isinstance(value, dict | list) else str(value)
        lines.append(f"{key.ljust(width)}  {'-' if value is None else printable(shown)}")
    # JSON, so a string result reads apart from none stored
    stored = "-" if row.result is None else printable(json.dumps(row.result, ensure_ascii=False))
    lines.append(f"{'result'.ljust(width)}  {stored}")
    for error in errors:  # a multi-line error (a database's, say) prints as its lines
        first, *more = str(error["error"]).splitlines() or [""]
        lines.append(f"error (attempt {error['attempt']}): {printable(first)}")
        lines.extend("  " + printable(line) for line in more)
        lines.extend("    " + printable(tb)
                     for tb in str(error.get("traceback") or "").splitlines())
    return "\n".join(lines)


def duration(seconds: float) -> str:
    """Seconds as ``1h 2m 3s``; fractions shown only under a minute."""
    if seconds < 60:
        return f"{seconds:.3g}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h"] if hours else []
    if minutes or hours:
        parts.append(f"{minutes}m")
    parts.append(f"{secs}s")
    return " ".join(parts)


def actor() -> str:
    """Who an admin command acts as, in the audit log: ``cli:<user>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"
