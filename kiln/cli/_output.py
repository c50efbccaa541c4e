"""How the CLI prints jobs and servers: plain text for people, JSON for scripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kiln._job import JobRow, ServerInfo


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def job_json(row: JobRow, *, result: bool = False) -> dict[str, Any]:
    """``row`` for scripts; with ``result``, its stored result too (read by a get, never
    by a listing, which leaves it out rather than show a null it did not read)."""
    data = {
        "id": row.id,
        "queue": row.queue,
        "kind": row.kind,
        "state": row.state.value,
        "args": row.args,
        "params": row.params,
        "metadata": row.metadata,
        "tags": list(row.tags),
        "priority": row.priority,
        "attempt": row.attempt,
        "max_attempts": row.max_attempts,
        "timeout": row.timeout,
        "backoff": row.backoff,
        "run_at": _when(row.run_at),
        "created_at": _when(row.created_at),
        "admitted_at": _when(row.admitted_at),
        "attempted_at": _when(row.attempted_at),
        "finished_at": _when(row.finished_at),
        "server_id": row.server_id,
        "rate_key": row.rate_key,
        "rescues": row.rescues,
        "depends_on": list(row.depends_on),
        "errors": [e.to_json() for e in row.errors],
    }
    if result:
        data["result"] = row.result
    return data


def server_json(info: ServerInfo, leader: str | None) -> dict[str, Any]:
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "queues": info.queues,
        "kinds": info.kinds,
        "version": info.version,
        "started_at": _when(info.started_at),
        "heartbeat_at": _when(info.heartbeat_at),
        "heartbeat_age": info.heartbeat_age,
        "leader": info.id == leader,
    }


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def json_line(value: Any) -> str:
    """``value`` as one line of JSON Lines (no newline inside it)."""
    return json.dumps(value, separators=(",", ":"), default=str) + "\n"


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on or hide (ESC of ANSI escapes,
    other controls, bidi overrides, zero-width characters) written as a Python escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


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
    for error in errors:
        message = printable(str(error["error"]))
        lines.append(f"error (attempt {error['attempt']}): {message}")
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
