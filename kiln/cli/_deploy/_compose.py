"""Kiln workers in a compose file, for ``kiln check-deploy``.

Owns reading services: which run ``kiln worker`` (entrypoint and command), their
environment as compose builds it (env_file in order, then environment, with
``${NAME:-default}`` interpolated from this process's environment as compose would),
stop_grace_period (10s when unset) and stop_signal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln.cli._deploy._files import (
    COMPOSE_DEFAULT_GRACE,
    Worker,
    _argv,
    go_duration,
    interpolate,
    process_environ,
    read_env_file,
    worker_args,
)

GRACEFUL_SIGNALS = {"SIGTERM", "TERM", "SIGINT", "INT", "15", "2"}


def _words(value: Any) -> list[str]:
    environ = process_environ()
    if isinstance(value, str):
        return _argv(interpolate(value, environ))
    return [interpolate(word, environ) for word in _argv(value)]


def compose_workers(path: str, document: dict[str, Any]) -> list[Worker]:
    workers: list[Worker] = []
    for name, service in (document.get("services") or {}).items():
        if not isinstance(service, dict):
            continue
        args = worker_args(_words(service.get("entrypoint")) + _words(service.get("command")))
        if args is None:
            continue
        text = service.get("stop_grace_period")
        worker = Worker(
            file=path, what=f"service {name}", grace_name="stop_grace_period",
            grace=COMPOSE_DEFAULT_GRACE if text is None else go_duration(
                interpolate(str(text), process_environ())),
            grace_default=text is None, args=args, environ={},
        )
        worker.environ = _environ(Path(path).parent, service, worker)
        signal = str(service.get("stop_signal") or "SIGTERM").upper()
        if signal not in GRACEFUL_SIGNALS:
            worker.problems.append(
                f"stop_signal {signal} does not start kiln's graceful shutdown: "
                "use SIGTERM (or SIGINT)"
            )
        workers.append(worker)
    return workers


def _environ(base: Path, service: dict[str, Any], worker: Worker) -> dict[str, str]:
    environ: dict[str, str] = {}
    files = service.get("env_file") or []
    for entry in [files] if isinstance(files, str | dict) else files:
        target = entry if isinstance(entry, str) else str(entry.get("path"))
        optional = isinstance(entry, dict) and entry.get("required") is False
        environ.update(read_env_file(base / target, optional, worker))
    outside = process_environ()
    values = service.get("environment") or {}
    if isinstance(values, list):
        pairs = [str(v).partition("=") for v in values]
        values = {k: (v if sep else None) for k, sep, v in pairs}
    for key, value in values.items():
        if value is None:  # passed through from the environment of `docker-compose up`
            if key in outside:
                environ[key] = outside[key]
            continue
        environ[str(key)] = interpolate(str(value), outside)
    return environ
