"""What ``kiln check-deploy`` reads from a deploy file about one worker, and the parsing
the three formats share.

Owns the Worker record (grace period or the orchestrator's default, the command line
after ``kiln worker``, the environment as the orchestrator builds it), recognising a
``kiln worker`` command line, the duration formats of compose and systemd, compose's
variable interpolation and env files. It judges nothing; check_deploy.py does.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# What each orchestrator waits when the file does not say.
K8S_DEFAULT_GRACE = 30.0  # terminationGracePeriodSeconds
COMPOSE_DEFAULT_GRACE = 10.0  # stop_grace_period
SYSTEMD_DEFAULT_GRACE = 90.0  # DefaultTimeoutStopSec
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "Pod", "CronJob",
             "ReplicationController"}


class DeployFileError(Exception):
    """A file that cannot be read as any of the formats; the message names it."""


@dataclasses.dataclass
class Worker:
    """One place that runs ``kiln worker``, as its deploy file describes it."""

    file: str
    what: str  # "Deployment kiln-worker, container worker"
    grace_name: str  # the setting: terminationGracePeriodSeconds, stop_grace_period, ...
    grace: float | None  # seconds; None: no limit
    grace_default: bool  # not set in the file: the orchestrator's default applies
    args: list[str]  # the command line after ``worker``
    environ: dict[str, str]
    before_stop: float = 0.0  # seconds spent before the signal (a preStop hook)
    notes: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    unreadable: list[str] = dataclasses.field(default_factory=list)  # env set from secrets
    liveness_window: float | None = None  # seconds of failed liveness probes before a kill
    exposed_ports: dict[int, list[str]] = dataclasses.field(default_factory=dict)  # why


# ------------------------------------------------------------------ command lines
def _strip_exec(words: list[str]) -> list[str]:
    return words[1:] if words[:1] == ["exec"] else words


def worker_args(argv: list[str]) -> list[str] | None:
    """The arguments after ``kiln worker`` in ``argv``, or None when it runs no worker.

    Knows ``kiln worker``, ``/path/to/kiln worker``, ``python -m kiln[.cli] worker``,
    global ``--database-url`` before the sub-command, and ``sh -c "... kiln worker ..."``.
    """
    if len(argv) >= 3 and Path(argv[0]).name in ("sh", "bash", "dash") and "-c" in argv:
        script = argv[argv.index("-c") + 1] if argv.index("-c") + 1 < len(argv) else ""
        for part in re.split(r"&&|;|\|\|", script):
            found = worker_args(_strip_exec(shlex.split(part)))
            if found is not None:
                return found
        return None
    for i, word in enumerate(argv):
        rest: list[str] | None = None
        if Path(word).name == "kiln":
            rest = argv[i + 1:]
        elif word == "-m" and i + 1 < len(argv) and argv[i + 1] in ("kiln", "kiln.cli"):
            rest = argv[i + 2:]
        if rest is None:
            continue
        rest = _skip_global_options(rest)
        if rest[:1] == ["worker"]:
            return rest[1:]
    return None


def _skip_global_options(words: list[str]) -> list[str]:
    while words and words[0].startswith("--database-url"):
        words = words[2:] if words[0] == "--database-url" else words[1:]
    return words


def _argv(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return shlex.split(value)
    return [str(v) for v in value]


# --------------------------------------------------------------------- durations
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_SYSTEMD_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0, "second": 1.0,
    "seconds": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0,
    "hr": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0,
    "days": 86400.0, "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
}


def _span(text: str, units: Mapping[str, float], what: str) -> float:
    text = text.strip()
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", text):
        return float(text)
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*([a-zµ]+)", text)
    rebuilt = "".join(f"{n}{u}" for n, u in parts)
    if not parts or rebuilt != re.sub(r"\s+", "", text) or any(u not in units for _, u in parts):
        raise ValueError(f"cannot read {what} {text!r}")
    return sum(float(n) * units[u] for n, u in parts)


def go_duration(text: str) -> float:
    """Compose's durations: ``45s``, ``1m30s``, ``500ms``; a bare number is seconds."""
    return _span(text, _GO_UNITS, "duration")


def systemd_timespan(text: str) -> float | None:
    """systemd time spans (``45``, ``45s``, ``1min 30s``); None for ``infinity``."""
    if text.strip() == "infinity":
        return None
    return _span(text, _SYSTEMD_UNITS, "time span")


# ------------------------------------------------------------------- environment
_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|"
                       r"\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(text: str, environ: Mapping[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}``, ``${NAME:?error}`` and ``$$``."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        op, arg = match.group(2), match.group(3) or ""
        value = environ.get(name)
        empty = value is None or (op is not None and op.startswith(":") and value == "")
        if op is not None and op.endswith("-") and empty:
            return arg
        return value or ""

    return _VARIABLE.sub(one, text)


def env_file_lines(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of an env file (compose's env_file, systemd's EnvironmentFile)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        if sep:
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            values[key.strip()] = value
    return values


def read_env_file(path: Path, optional: bool, worker: Worker) -> dict[str, str]:
    try:
        return env_file_lines(path)
    except FileNotFoundError:
        if not optional:
            worker.notes.append(f"environment file {path} is not on this machine: "
                                "any ServerConfig it sets is not seen here")
        return {}


def process_environ() -> Mapping[str, str]:
    """The environment compose interpolates ``${NAME}`` from: this process's."""
    return os.environ
