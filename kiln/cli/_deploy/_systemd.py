"""Kiln workers in systemd units, for ``kiln check-deploy``.

Owns reading a unit's [Service] section as systemd does: continuation lines, an empty
assignment resetting a list, Environment= (quoted assignments), EnvironmentFile=
(read when it is on this machine; its values beat Environment=), ExecStart= and its
prefixes, TimeoutStopSec= (or TimeoutSec=; 90s when unset) and KillSignal=.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from kiln.cli._deploy._files import (
    SYSTEMD_DEFAULT_GRACE,
    DeployFileError,
    Worker,
    read_env_file,
    systemd_timespan,
    worker_args,
)

GRACEFUL_SIGNALS = {"SIGTERM", "TERM", "SIGINT", "INT", "15", "2"}


def service_section(path: str, text: str) -> list[tuple[str, str]]:
    """The (key, value) assignments of [Service], in order, continuations joined."""
    assignments: list[tuple[str, str]] = []
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise DeployFileError(f"{path}: not a unit file line: {line!r}")
        if section == "[Service]":
            assignments.append((key.strip(), value.strip()))
    return assignments


def unit_workers(path: str, text: str) -> list[Worker]:
    assignments = service_section(path, text)
    exec_start = ""
    for key, value in assignments:
        if key == "ExecStart":
            exec_start = value.lstrip("@-:+!")  # an empty one resets the list
    args = worker_args(shlex.split(exec_start)) if exec_start else None
    if args is None:
        return []
    worker = Worker(file=path, what=f"unit {Path(path).name}", grace_name="TimeoutStopSec",
                    grace=SYSTEMD_DEFAULT_GRACE, grace_default=True, args=args, environ={})
    worker.environ = _environ(assignments, worker)
    signal = "SIGTERM"
    for key, value in assignments:
        if key in ("TimeoutStopSec", "TimeoutSec") and value:
            try:
                worker.grace = systemd_timespan(value)
            except ValueError as exc:
                raise DeployFileError(f"{path}: {key}={value}: {exc}") from exc
            worker.grace_default = False
        elif key == "KillSignal" and value:
            signal = value.upper()
    if signal not in GRACEFUL_SIGNALS:
        worker.problems.append(f"KillSignal={signal} does not start kiln's graceful shutdown: "
                               "use SIGTERM (or SIGINT)")
    return [worker]


def _environ(assignments: list[tuple[str, str]], worker: Worker) -> dict[str, str]:
    """Environment= in order (empty resets), then EnvironmentFile=, whose values win."""
    environment: dict[str, str] = {}
    from_files: dict[str, str] = {}
    for key, value in assignments:
        if key == "Environment":
            if not value:
                environment.clear()
            for word in shlex.split(value):
                name, _, setting = word.partition("=")
                environment[name] = setting
        elif key == "EnvironmentFile" and value:
            optional = value.startswith("-")
            from_files.update(read_env_file(Path(value.lstrip("-")), optional, worker))
    return {**environment, **from_files}
