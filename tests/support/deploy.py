"""What the deployment tests (tests/deploy) share: the shipped files, their loaders, and the
validators they run.

Validators that CI installs (docker-compose, promtool, amtool, kubernetes-validate)
skip locally when missing and fail with CI=true; kubectl and systemd-analyze are used
where present and skip with their reason otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
UNIT = DEPLOY / "systemd" / "kiln-worker.service"
PROMETHEUS = DEPLOY / "prometheus" / "prometheus.yml"


# what `docker-compose config` needs to interpolate the compose file
COMPOSE_ENV = {"POSTGRES_PASSWORD": "test-password",
               "KILN_DASHBOARD_TOKEN": "compose-test-token-0123456789"}
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
