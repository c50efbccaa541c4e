"""ServerConfig from the command line: one flag and one environment variable per field.

``poll_interval`` is ``--poll-interval`` and ``KILN_POLL_INTERVAL``; a flag beats the
environment, which beats the default. Durations take seconds or a unit
(``500ms``, ``30s``, ``5m``, ``2h``); optional ones also take ``none``. Values are
checked by ServerConfig itself, so its errors name the field and the rule.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from kiln._errors import ConfigError
from kiln._server import DEFAULTS, ServerConfig

HELP = {
    "poll_interval": "how often an idle pool looks for work without a notification",
    "heartbeat_interval": "how often the server reports that it is alive",
    "dead_after": "silence after which a server's running jobs are rescued elsewhere",
    "leader_ttl": "lease of the leader that runs recurring jobs, rescue, sweep and pruning",
    "shutdown_timeout": "how long shutdown waits for running jobs",
    "kill_grace": "extra wait after cancelling jobs that ignored the shutdown",
    "timeout": "default per-job timeout",
    "release_interval": "delayed-job check when no notifications arrive",
    "sync_threads": "threads for plain def handlers (0: the sum of the concurrencies)",
    "results_batch": "results written per round trip",
    "results_max_pending": "unwritten results beyond which claiming slows",
    "results_flush_interval": "how long results wait to be batched",
    "prune_completed_after": "delete completed jobs this old (none: keep)",
    "prune_cancelled_after": "delete cancelled jobs this old (none: keep)",
    "prune_failed_after": "delete failed jobs this old (none: keep)",
    "prune_interval": "how often the leader prunes",
    "prune_batch": "jobs deleted per prune statement",
    "sweep_after": "remove records of servers dead for this long",
    "admit_batch": "rate-limited jobs admitted per round trip",
    "rescue_batch": "jobs rescued per round trip",
    "max_result_bytes": "largest stored result, in bytes of JSON, of a kind that sets none",
}

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")


def env_name(field: str) -> str:
    return f"KILN_{field.upper()}"


def _kind(field: dataclasses.Field[Any]) -> str:
    text = str(field.type)
    if "None" in text:
        return "optional"
    return "int" if text == "int" else "duration"


def parse_value(field: dataclasses.Field[Any], text: str, source: str) -> Any:
    kind = _kind(field)
    label = field.name if source.startswith("--") else f"{field.name} (from ${source})"
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise ConfigError(label, text, "must be a whole number") from None
    if kind == "optional" and text.strip().lower() in ("none", "off", ""):
        return None
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(label, text, "must be a duration such as 2.5, 500ms, 30s, 5m or 2h")
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not math.isfinite(value):
        raise ConfigError(label, text, "must be a finite duration")
    return value


def _default_text(field: dataclasses.Field[Any]) -> str:
    default = DEFAULTS[field.name]
    return "none" if default is None else f"{default:g}" if isinstance(default, float) else str(
        default
    )


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "server configuration", "each flag can also be set as an environment variable"
    )
    for field in dataclasses.fields(ServerConfig):
        kind = _kind(field)
        unit = " seconds" if kind != "int" else ""
        group.add_argument(
            f"--{field.name.replace('_', '-')}",
            dest=f"config_{field.name}",
            metavar="N" if kind == "int" else "DURATION",
            default=None,
            help=f"{HELP.get(field.name, field.name)} "
            f"(${env_name(field.name)}; default {_default_text(field)}{unit})",
        )


def config_from(args: argparse.Namespace, environ: Mapping[str, str]) -> ServerConfig:
    """Build the ServerConfig; raises ConfigError naming the field for any bad value."""
    values: dict[str, Any] = {}
    from_env: set[str] = set()
    for field in dataclasses.fields(ServerConfig):
        flag = getattr(args, f"config_{field.name}", None)
        if flag is not None:
            values[field.name] = parse_value(field, flag, f"--{field.name.replace('_', '-')}")
        elif env_name(field.name) in environ:
            values[field.name] = parse_value(
                field, environ[env_name(field.name)], env_name(field.name)
            )
            from_env.add(field.name)
    try:
        return ServerConfig(**values)
    except ConfigError as exc:
        if exc.field not in from_env:
            raise
        # say where a value nobody typed on this command line came from
        raise ConfigError(f"{exc.field} (from ${env_name(exc.field)})", exc.value,
                          exc.rule) from exc
