"""``kiln check-deploy``: the shipped files pass, and deliberately broken copies fail with
a message naming the file, the object and the numbers.

Every broken copy is the shipped file with one change, written to tmp_path, so a test
fails if the shipped file drifts away from what it breaks.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln.cli._deploy._files import go_duration, interpolate, systemd_timespan, worker_args
from tests.support.deploy import COMPOSE, KUBERNETES, ROOT, UNIT, Checked, load, load_all

Check = Callable[..., Checked]
WORKER = KUBERNETES / "worker.yaml"


def worker_container(document: dict[str, Any]) -> dict[str, Any]:
    containers = document["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "worker")


def set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = [e for e in container["env"] if e["name"] != name]
    container["env"] = [*env, {"name": name, "value": value}]


def broken_worker(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    document = load(WORKER)
    change(document)
    path = tmp_path / "worker.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def broken_compose(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    document = load(COMPOSE)  # anchors and merge keys are resolved by the loader
    change(document)
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def broken_unit(tmp_path: Path, old: str, new: str) -> Path:
    text = UNIT.read_text(encoding="utf-8")
    assert old in text, f"{old!r} is not in the shipped unit"
    path = tmp_path / "kiln-worker.service"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def failed(result: Checked, *fragments: str) -> str:
    assert result.code == 1, result
    lines = [line for line in result.out.splitlines() if line.startswith("FAIL")]
    assert lines, result
    for fragment in fragments:
        assert any(fragment in line for line in lines), (fragment, result)
    return "\n".join(lines)


# ------------------------------------------------------------------ shipped files
def test_shipped_files_pass(check_deploy: Check) -> None:
    result = check_deploy(*sorted(KUBERNETES.glob("*.yaml")), COMPOSE, UNIT)
    assert result.code == 0, result
    ok = [line for line in result.out.splitlines() if line.startswith("ok")]
    assert len(ok) == 4, result  # the Deployment, two compose workers, the unit
    assert "4 passed, 0 failed" in result.out
    assert "terminationGracePeriodSeconds 45s > shutdown_timeout 30s ($KILN_SHUTDOWN_TIMEOUT)" \
        " + kill_grace 5s ($KILN_KILL_GRACE) = 35s" in result.out


def test_kustomization_follows_its_resources(check_deploy: Check) -> None:
    result = check_deploy(KUBERNETES / "kustomization.yaml")
    assert result.code == 0, result
    assert "Deployment kiln-worker, container worker" in result.out


def test_stdin_through_the_real_command() -> None:
    """``kiln check-deploy -`` as a process, fed one manifest on stdin."""
    done = subprocess.run([sys.executable, "-m", "kiln.cli", "check-deploy", "-"],
                          input=WORKER.read_text(encoding="utf-8"), capture_output=True,
                          text=True, timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("ok   -: Deployment kiln-worker"), done.stdout


# ------------------------------------------------------------------- grace rules
def test_kubernetes_grace_period_equal_to_the_need_fails(
    check_deploy: Check, tmp_path: Path
) -> None:
    def change(d: dict[str, Any]) -> None:
        d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 35

    path = broken_worker(tmp_path, change)
    failed(check_deploy(path), f"{path}: Deployment kiln-worker, container worker: "
           "terminationGracePeriodSeconds 35s is not above shutdown_timeout 30s "
           "($KILN_SHUTDOWN_TIMEOUT) + kill_grace 5s ($KILN_KILL_GRACE) = 35s",
           "wait dead_after (60s) to be rescued")


def test_an_autoscaled_worker_is_held_to_the_grace_rule_and_says_so(
    check_deploy: Check, tmp_path: Path
) -> None:
    """A ScaledObject's scale-in is a SIGTERM: the worker it scales is judged as any
    other (here its grace is too short), with a note naming the autoscaler; one that
    may scale to zero is told what stops there."""
    def change(d: dict[str, Any]) -> None:
        d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 20

    path = broken_worker(tmp_path, change)
    scaled = load(KUBERNETES / "worker-scaledobject.yaml")
    scaled["spec"]["minReplicaCount"] = 0
    path.write_text(path.read_text(encoding="utf-8") + "---\n" + yaml.safe_dump(scaled),
                    encoding="utf-8")
    result = check_deploy(path)
    failed(result, "terminationGracePeriodSeconds 20s is not above")
    notes = [line for line in result.out.splitlines() if line.startswith("note")]
    assert any("scaled by ScaledObject kiln-worker (0 to 200 replicas)" in line
               and "SIGTERM" in line and "recurring jobs" in line for line in notes), result


def test_kubernetes_default_grace_period_fails(check_deploy: Check, tmp_path: Path) -> None:
    path = broken_worker(
        tmp_path, lambda d: d["spec"]["template"]["spec"].pop("terminationGracePeriodSeconds"))
    failed(check_deploy(path), "terminationGracePeriodSeconds 30s (not set: the default)")


def test_longer_shutdown_timeout_needs_a_longer_grace_period(
    check_deploy: Check, tmp_path: Path
) -> None:
    path = broken_worker(
        tmp_path, lambda d: set_env(worker_container(d), "KILN_SHUTDOWN_TIMEOUT", "2m"))
    failed(check_deploy(path), "terminationGracePeriodSeconds 45s is not above "
           "shutdown_timeout 120s ($KILN_SHUTDOWN_TIMEOUT) + kill_grace 5s")


def test_a_flag_beats_the_environment(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        worker_container(d)["command"] += ["--kill-grace", "20s"]

    path = broken_worker(tmp_path, change)
    failed(check_deploy(path), "kill_grace 20s (--kill-grace) = 50s")


def test_absent_config_falls_back_to_the_defaults(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        container = worker_container(d)
        container["env"] = [e for e in container["env"] if "SHUTDOWN" not in e["name"]
                            and "KILL_GRACE" not in e["name"]]

    result = check_deploy(broken_worker(tmp_path, change))
    assert result.code == 0, result
    assert "shutdown_timeout 30s (default) + kill_grace 5s (default) = 35s" in result.out


def test_a_pre_stop_sleep_uses_up_the_grace_period(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        worker_container(d)["lifecycle"] = {"preStop": {"sleep": {"seconds": 10}}}

    failed(check_deploy(broken_worker(tmp_path, change)),
           "not above the preStop sleep 10s + shutdown_timeout 30s")


def test_config_map_values_are_resolved(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        container = worker_container(d)
        container["env"] = [e for e in container["env"] if e["name"] != "KILN_SHUTDOWN_TIMEOUT"]
        container["envFrom"] = [{"configMapRef": {"name": "kiln-config"}}]

    path = broken_worker(tmp_path, change)
    config_map = tmp_path / "config.yaml"
    config_map.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kiln-config"},
        "data": {"KILN_SHUTDOWN_TIMEOUT": "40s"}}), encoding="utf-8")
    failed(check_deploy(path, config_map), "shutdown_timeout 40s ($KILN_SHUTDOWN_TIMEOUT)")
    # without the ConfigMap the default applies, and the command says what it could not see
    result = check_deploy(path)
    assert result.code == 0, result
    assert "ConfigMap kiln-config (envFrom) is not among the files" in result.out


def test_compose_grace_period(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["services"]["worker-2"]["stop_grace_period"] = "35s"
        del d["services"]["worker-1"]["stop_grace_period"]

    path = broken_compose(tmp_path, change)
    out = failed(check_deploy(path),
                 f"{path}: service worker-1: stop_grace_period 10s (not set: the default)",
                 f"{path}: service worker-2: stop_grace_period 35s is not above")
    assert out.count("FAIL") == 2


def test_compose_stop_signal(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        d["services"]["worker-1"]["stop_signal"] = "SIGKILL"

    failed(check_deploy(broken_compose(tmp_path, change)),
           "service worker-1: stop_signal SIGKILL does not start kiln's graceful shutdown")


def test_compose_env_file(check_deploy: Check, tmp_path: Path) -> None:
    (tmp_path / "kiln.env").write_text("# tuned for long reports\nKILN_SHUTDOWN_TIMEOUT=5m\n",
                                       encoding="utf-8")

    def change(d: dict[str, Any]) -> None:
        worker = d["services"]["worker-1"]
        worker["env_file"] = ["kiln.env"]
        del worker["environment"]["KILN_SHUTDOWN_TIMEOUT"]

    failed(check_deploy(broken_compose(tmp_path, change)),
           "service worker-1: stop_grace_period 45s is not above shutdown_timeout 300s")


def test_systemd_timeout_stop(check_deploy: Check, tmp_path: Path) -> None:
    path = broken_unit(tmp_path, "TimeoutStopSec=45s", "TimeoutStopSec=30")
    failed(check_deploy(path), f"{path}: unit kiln-worker.service: TimeoutStopSec 30s is not "
           "above shutdown_timeout 30s ($KILN_SHUTDOWN_TIMEOUT) + kill_grace 5s")
    path = broken_unit(tmp_path, "TimeoutStopSec=45s\n", "")
    result = check_deploy(path)  # systemd's default is 90s
    assert result.code == 0, result
    assert "TimeoutStopSec 90s" in result.out
    path = broken_unit(tmp_path, "TimeoutStopSec=45s", "TimeoutStopSec=1min 30s\nTimeoutSec=20")
    failed(check_deploy(path), "TimeoutStopSec 20s is not above")


def test_systemd_kill_signal(check_deploy: Check, tmp_path: Path) -> None:
    path = broken_unit(tmp_path, "KillSignal=SIGTERM", "KillSignal=SIGKILL")
    failed(check_deploy(path), "KillSignal=SIGKILL does not start kiln's graceful shutdown")


# --------------------------------------------------------------- dead_after rule
def test_dead_after_too_short(check_deploy: Check, tmp_path: Path) -> None:
    path = broken_worker(
        tmp_path, lambda d: set_env(worker_container(d), "KILN_DEAD_AFTER", "20s"))
    failed(check_deploy(path), "Deployment kiln-worker, container worker: ServerConfig "
           "refuses this configuration: invalid dead_after=20.0: must stay above "
           "3*heartbeat_interval + kill_grace + 5s = 25s")


def test_dead_after_broken_by_a_longer_heartbeat(check_deploy: Check, tmp_path: Path) -> None:
    path = broken_unit(tmp_path, "KILN_HEARTBEAT_INTERVAL=5s", "KILN_HEARTBEAT_INTERVAL=20s")
    failed(check_deploy(path), "invalid dead_after=60.0: must stay above "
           "3*heartbeat_interval + kill_grace + 5s = 70s")


def test_unreadable_value(check_deploy: Check, tmp_path: Path) -> None:
    path = broken_worker(
        tmp_path, lambda d: set_env(worker_container(d), "KILN_KILL_GRACE", "soon"))
    failed(check_deploy(path), "kill_grace (from $KILN_KILL_GRACE)")


# ------------------------------------------------------------- endpoints, probes
def test_probes_need_the_health_port_off_loopback(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        container = worker_container(d)
        container["env"] = [e for e in container["env"] if e["name"] != "KILN_HEALTH_HOST"]

    failed(check_deploy(broken_worker(tmp_path, change)),
           "the health port 8080 is reached from outside the container (port health, "
           "startupProbe, readinessProbe, livenessProbe), but the worker listens on 127.0.0.1 "
           "only: set KILN_HEALTH_HOST=0.0.0.0")


def test_probes_on_the_wrong_port(check_deploy: Check, tmp_path: Path) -> None:
    path = broken_worker(
        tmp_path, lambda d: set_env(worker_container(d), "KILN_HEALTH_PORT", "8081"))
    failed(check_deploy(path), "startupProbe, readinessProbe, livenessProbe check port 8080, "
           "but the worker serves /healthz on port 8081")


# ---------------------------------------------------------------- what it reads
def test_no_worker_fails(check_deploy: Check) -> None:
    result = check_deploy(KUBERNETES / "dashboard.yaml")
    assert result.code == 1, result
    assert "no `kiln worker` found" in result.out


def test_invalid_yaml_fails(check_deploy: Check, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kind: Deployment\nspec: [unclosed\n", encoding="utf-8")
    result = check_deploy(path)
    assert result.code == 1, result
    assert f"{path}: not valid YAML" in result.out


def test_missing_file_is_a_usage_error(check_deploy: Check, tmp_path: Path) -> None:
    result = check_deploy(tmp_path / "nope.yaml")
    assert result.code == 2, result
    assert "no such file" in result.err


def test_stdin(check_deploy: Check, monkeypatch: pytest.MonkeyPatch) -> None:
    documents = [*load_all(KUBERNETES / "dashboard.yaml"), load(WORKER)]
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump_all(documents)))
    result = check_deploy("-")
    assert result.code == 0, result


@pytest.mark.parametrize(("argv", "expected"), [
    (["kiln", "worker", "jobs:app"], ["jobs:app"]),
    (["/opt/kiln/venv/bin/kiln", "--database-url", "x", "worker", "a:b", "--queue", "q"],
     ["a:b", "--queue", "q"]),
    (["python", "-m", "kiln.cli", "worker", "a:b"], ["a:b"]),
    (["python3", "-m", "kiln", "--database-url=x", "worker"], []),
    (["sh", "-c", "kiln migrate && exec kiln worker a:b --kill-grace 3s"],
     ["a:b", "--kill-grace", "3s"]),
    (["kiln", "dashboard"], None),
    (["kiln", "migrate"], None),
    (["python", "-m", "other", "worker"], None),
])
def test_worker_args(argv: list[str], expected: list[str] | None) -> None:
    assert worker_args(argv) == expected


def test_durations() -> None:
    assert go_duration("45s") == 45 and go_duration("1m30s") == 90
    assert go_duration("1500ms") == 1.5 and go_duration("20") == 20
    assert systemd_timespan("1min 30s") == 90 and systemd_timespan("45") == 45
    assert systemd_timespan("2h") == 7200 and systemd_timespan("infinity") is None
    for bad in ("45 parsecs", "s", "1m x"):
        with pytest.raises(ValueError):
            go_duration(bad)


def test_interpolation() -> None:
    env = {"A": "1", "EMPTY": ""}
    assert interpolate("${A}-$A-${B:-2}-${EMPTY:-3}-${EMPTY-4}-$$A", env) == "1-1-2-3--$A"
    assert interpolate("${B:?must be set}", env) == ""


def test_short_liveness_window_is_noted(check_deploy: Check, tmp_path: Path) -> None:
    def change(d: dict[str, Any]) -> None:
        worker_container(d)["livenessProbe"]["failureThreshold"] = 3

    result = check_deploy(broken_worker(tmp_path, change))
    assert result.code == 0, result  # a note, not a failure: kubelets differ here
    assert "the liveness probe restarts the container after 30s of failures, while a " \
        "shutdown may take 35s" in result.out
