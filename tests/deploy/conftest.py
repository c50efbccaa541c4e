"""Fixtures of the deploy tests: paths of the shipped files, the offline validators, and
``kiln check-deploy`` run in-process.

Validators that CI installs (docker-compose, promtool, amtool, kubernetes-validate)
skip locally when missing and fail with CI=true; kubectl and systemd-analyze are used
where present and skip with their reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiln.cli import run as kiln_run

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
UNIT = DEPLOY / "systemd" / "kiln-worker.service"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"
IN_CI = os.environ.get("CI", "").lower() == "true"
# what `docker-compose config` needs to interpolate the compose file
COMPOSE_ENV = {"POSTGRES_PASSWORD": "test-password",
               "KILN_DASHBOARD_TOKEN": "compose-test-token-0123456789"}

Run = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def binary(name: str, install: str, *, ci_needs: bool) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                  else None)
    if path is None:
        if ci_needs and IN_CI:
            pytest.fail(f"{name} is not installed ({install}); CI=true: it must run")
        pytest.skip(f"{name} is not installed ({install})")
    return path


def runner(name: str, install: str, *, ci_needs: bool = True,
           env: dict[str, str] | None = None) -> Run:
    path = binary(name, install, ci_needs=ci_needs)

    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([path, *args], capture_output=True, text=True, timeout=90,
                              check=False, env={**os.environ, **(env or {})})

    return run


def load_all(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [d for d in yaml.safe_load_all(handle) if d is not None]


def load(path: Path) -> dict[str, Any]:
    documents = load_all(path)
    assert len(documents) == 1, path
    return documents[0]


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, document) for path in sorted(KUBERNETES.glob("*.yaml"))
            if path.name != "kustomization.yaml" for document in load_all(path)]


def find(kind: str, name: str) -> dict[str, Any]:
    for _, document in manifests():
        if document["kind"] == kind and document["metadata"]["name"] == name:
            return document
    raise AssertionError(f"no {kind} {name} in {KUBERNETES}")


class Checked:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"exit {self.code}\n{self.out}{self.err}"


@pytest.fixture
def check_deploy(capsys: pytest.CaptureFixture[str]) -> Callable[..., Checked]:
    """``kiln check-deploy ARGS`` through the CLI's own dispatcher."""

    def check(*args: str | Path) -> Checked:
        capsys.readouterr()
        code = kiln_run(["check-deploy", *map(str, args)])
        captured = capsys.readouterr()
        return Checked(code, captured.out, captured.err)

    return check
