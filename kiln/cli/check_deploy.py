"""``kiln check-deploy FILE...``: do deploy files give kiln workers time to shut down?

Reads Kubernetes manifests (multi-document YAML, a kustomization's resources), compose
files and systemd units (``-`` reads stdin, e.g. ``kubectl kustomize DIR | kiln
check-deploy -``), finds the containers, services and units that run ``kiln worker``,
and works out each one's ServerConfig from its flags and environment exactly as the
worker will (defaults from kiln._server._config.DEFAULTS). It fails, exit code 1, naming the
file, the object and the numbers, when:

- the grace period (terminationGracePeriodSeconds, stop_grace_period, TimeoutStopSec,
  less a preStop sleep) is not above shutdown_timeout + kill_grace: the worker would be
  killed before it hands its unfinished jobs back, and they would wait dead_after;
- ServerConfig refuses the configuration (dead_after must stay above
  3*heartbeat_interval + kill_grace + 5s, and every other rule it checks);
- the stop signal is not one that starts kiln's graceful shutdown;
- a probe or a declared port reaches the health or metrics endpoint from outside the
  pod while the worker listens on loopback only.

Reading the files lives in _deploy_scan and the per-format modules; this one judges.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import sys
from pathlib import Path
from typing import Any

from kiln._errors import ConfigError
from kiln._server import DEFAULTS, ServerConfig
from kiln.cli._argparse import Parser, UsageError
from kiln.cli._deploy._files import DeployFileError, Worker
from kiln.cli._deploy._scan import scan
from kiln.cli._server_config import add_flags, env_name, parse_value

ENDPOINTS = {"health": "KILN_HEALTH", "metrics": "KILN_METRICS"}


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "check-deploy", help="check that deploy files let kiln workers shut down cleanly",
        description="Check Kubernetes manifests, compose files and systemd units: every "
        "kiln worker's grace period must be above shutdown_timeout + kill_grace, and its "
        "ServerConfig (flags and KILN_* environment, else the defaults) must be valid, "
        "dead_after included. Exit code 1 when a check fails.",
    )
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="a manifest, compose file or unit; - reads stdin")
    parser.set_defaults(func=run)


@dataclasses.dataclass
class Verdict:
    worker: Worker
    config: dict[str, Any]  # field: value, as the worker would see it
    sources: dict[str, str]  # field: where the value came from
    problems: list[str]
    notes: list[str]


def run(args: argparse.Namespace) -> int:
    texts = {path: _read(path) for path in args.files}
    try:
        found = scan(list(args.files), texts)
    except DeployFileError as exc:
        print(f"FAIL {exc}")
        return 1
    except ImportError as exc:
        raise UsageError(f"check-deploy needs PyYAML for YAML files ({exc}): "
                         "pip install pyyaml") from exc
    for note in found.notes:
        print(f"note {note}")
    if not found.workers:
        print(f"FAIL no `kiln worker` found in {', '.join(args.files)}: nothing was checked")
        return 1
    verdicts = [judge(worker) for worker in found.workers]
    for verdict in verdicts:
        report(verdict)
    failed = sum(1 for v in verdicts if v.problems)
    print(f"{len(verdicts) - failed} passed, {failed} failed")
    return 1 if failed else 0


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"check-deploy: no such file: {path}") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise UsageError(f"check-deploy: cannot read {path}: {exc}") from None


def _flags(args: list[str]) -> argparse.Namespace:
    parser = Parser(prog="kiln worker", add_help=False)
    add_flags(parser)
    for endpoint in ENDPOINTS:
        parser.add_argument(f"--{endpoint}-port", default=None)
        parser.add_argument(f"--{endpoint}-host", default=None)
    namespace, _ = parser.parse_known_args(args)
    return namespace


def judge(worker: Worker) -> Verdict:
    """The worker's configuration and everything wrong with it."""
    namespace = _flags(worker.args)
    verdict = Verdict(worker, dict(DEFAULTS), {k: "default" for k in DEFAULTS},
                      list(worker.problems), list(worker.notes))
    for field in dataclasses.fields(ServerConfig):
        flag = getattr(namespace, f"config_{field.name}", None)
        source = f"--{field.name.replace('_', '-')}" if flag is not None else (
            env_name(field.name) if env_name(field.name) in worker.environ else None)
        if env_name(field.name) in worker.unreadable and flag is None:
            verdict.notes.append(f"{env_name(field.name)} is set from a Secret or the "
                                 "downward API, not read here: its default is assumed")
        if source is None:
            continue
        text = flag if flag is not None else worker.environ[source]
        try:
            verdict.config[field.name] = parse_value(field, text, source)
            verdict.sources[field.name] = source if flag is not None else f"${source}"
        except ConfigError as exc:
            verdict.problems.append(str(exc))
    try:
        ServerConfig(**verdict.config)
    except ConfigError as exc:
        verdict.problems.append(f"ServerConfig refuses this configuration: {exc}")
    need = verdict.config["shutdown_timeout"] + verdict.config["kill_grace"]
    if worker.liveness_window is not None and worker.liveness_window <= need:
        verdict.notes.append(
            f"the liveness probe restarts the container after {_s(worker.liveness_window)} "
            f"of failures, while a shutdown may take {_s(need)} and /healthz answers 503 "
            "during it: make periodSeconds * failureThreshold longer")
    grace = _grace_problem(worker, verdict)
    if grace is not None:
        verdict.problems.append(grace)
    verdict.problems.extend(_endpoint_problems(worker, namespace))
    return verdict


def _s(value: float) -> str:
    return f"{value:g}s"


def _need(worker: Worker, config: dict[str, Any], sources: dict[str, str]) -> tuple[float, str]:
    parts = [f"shutdown_timeout {_s(config['shutdown_timeout'])} "
             f"({sources['shutdown_timeout']})",
             f"kill_grace {_s(config['kill_grace'])} ({sources['kill_grace']})"]
    if worker.before_stop:
        parts.insert(0, f"the preStop sleep {_s(worker.before_stop)}")
    need = worker.before_stop + config["shutdown_timeout"] + config["kill_grace"]
    return need, f"{' + '.join(parts)} = {_s(need)}"


def _grace_problem(worker: Worker, verdict: Verdict) -> str | None:
    need, why = _need(worker, verdict.config, verdict.sources)
    if worker.grace is None or worker.grace > need:
        return None
    unset = " (not set: the default)" if worker.grace_default else ""
    return (f"{worker.grace_name} {_s(worker.grace)}{unset} is not above {why}: the worker "
            "would be killed before it hands its unfinished jobs back, and they would wait "
            f"dead_after ({_s(verdict.config['dead_after'])}) to be rescued")


def is_loopback(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _endpoint_problems(worker: Worker, namespace: argparse.Namespace) -> list[str]:
    problems: list[str] = []
    for endpoint, env in ENDPOINTS.items():
        port_text = getattr(namespace, f"{endpoint}_port") or worker.environ.get(f"{env}_PORT")
        host = getattr(namespace, f"{endpoint}_host") or worker.environ.get(f"{env}_HOST") \
            or "127.0.0.1"
        port = int(port_text) if port_text and port_text.isdigit() else None
        if port in worker.exposed_ports and is_loopback(host):
            problems.append(
                f"the {endpoint} port {port} is reached from outside the container "
                f"({', '.join(worker.exposed_ports[port])}), but the worker listens on {host} "
                f"only: set {env}_HOST=0.0.0.0"
            )
    health = namespace.health_port or worker.environ.get("KILN_HEALTH_PORT")
    for port, reasons in sorted(worker.exposed_ports.items()):
        probes = [why for why in reasons if why.endswith("Probe")]
        if probes and str(port) != str(health):
            served = f"on port {health}" if health else "nowhere (no KILN_HEALTH_PORT)"
            problems.append(f"{', '.join(probes)} check port {port}, but the worker serves "
                            f"/healthz {served}")
    return problems


def report(verdict: Verdict) -> None:
    worker = verdict.worker
    where = f"{worker.file}: {worker.what}"
    for note in verdict.notes:
        print(f"note {where}: {note}")
    for problem in verdict.problems:
        print(f"FAIL {where}: {problem}")
    if not verdict.problems:
        _, why = _need(worker, verdict.config, verdict.sources)
        grace = "no limit" if worker.grace is None else _s(worker.grace)
        config = verdict.config
        floor = 3 * config["heartbeat_interval"] + config["kill_grace"] + 5.0
        print(f"ok   {where}: {worker.grace_name} {grace} > {why}; "
              f"dead_after {_s(config['dead_after'])} > 3*heartbeat_interval "
              f"{_s(config['heartbeat_interval'])} + kill_grace + 5s = {_s(floor)}")
