"""Which deploy files ``kiln check-deploy`` was given, and the workers in them.

Owns telling the formats apart (a unit with a [Service] section; YAML with top-level
``services``: compose; anything else: Kubernetes manifests, multi-document, with a
kustomization's local resources followed) and collecting every worker, Kubernetes
manifests together so that a ConfigMap in one file serves a Deployment in another.
PyYAML is imported only when a YAML file is read.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from kiln.cli._deploy._compose import compose_workers
from kiln.cli._deploy._files import DeployFileError, Worker
from kiln.cli._deploy._kubernetes import manifest_workers
from kiln.cli._deploy._systemd import unit_workers


@dataclasses.dataclass
class Scan:
    """Everything found in the files: the workers, and notes about what was not read."""

    workers: list[Worker] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)


def scan(paths: list[str], read: Mapping[str, str]) -> Scan:
    """Workers in ``paths``; ``read`` maps each path to its text (``-`` is stdin)."""
    result = Scan()
    manifests: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        text = read[path]
        if path.endswith((".service", ".socket")) or re.search(r"^\[Service\]", text, re.M):
            result.workers.extend(unit_workers(path, text))
            continue
        documents = _yaml_documents(path, text)
        compose = [d for d in documents if "services" in d and "kind" not in d]
        if compose:
            for document in compose:
                result.workers.extend(compose_workers(path, document))
            continue
        for document in documents:
            if document.get("kind") == "Kustomization" or (
                    "resources" in document and "kind" not in document):
                manifests.extend(_kustomization(path, document, result))
            else:
                manifests.append((path, document))
    result.workers.extend(manifest_workers(_unique(manifests)))
    return result


def _unique(manifests: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """Each object once, when a file is given and also listed by a kustomization."""
    seen: set[tuple[str, str, str]] = set()
    unique: list[tuple[str, dict[str, Any]]] = []
    for path, document in manifests:
        metadata = document.get("metadata") or {}
        key = (str(document.get("kind")), str(metadata.get("namespace", "")),
               str(metadata.get("name")))
        if key not in seen or path == "-":
            seen.add(key)
            unique.append((path, document))
    return unique


def _yaml_documents(path: str, text: str) -> list[dict[str, Any]]:
    import yaml

    try:
        loaded = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise DeployFileError(f"{path}: not valid YAML: {exc}") from exc
    documents: list[dict[str, Any]] = []
    for document in loaded:
        if document is None:
            continue
        if not isinstance(document, dict):
            raise DeployFileError(f"{path}: expected a mapping at the top of each document")
        if document.get("kind") == "List":
            documents.extend(i for i in document.get("items") or [] if isinstance(i, dict))
        else:
            documents.append(document)
    return documents


def _kustomization(
    path: str, document: dict[str, Any], result: Scan
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The resources a kustomization lists (files, and folders with a kustomization)."""
    base = Path(path).parent
    if any(k in document for k in ("patches", "patchesStrategicMerge", "patchesJson6902",
                                   "replacements", "configMapGenerator")):
        result.notes.append(
            f"{path}: patches and generators are not applied here; check what kustomize "
            f"builds instead: kubectl kustomize {base} | kiln check-deploy -"
        )
    for entry in document.get("resources") or []:
        target = base / str(entry)
        if target.is_dir():
            for name in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
                if (target / name).is_file():
                    nested = _yaml_documents(str(target / name), (target / name).read_text())
                    for inner in nested:
                        yield from _kustomization(str(target / name), inner, result)
                    break
        elif target.is_file():
            for inner in _yaml_documents(str(target), target.read_text(encoding="utf-8")):
                yield str(target), inner
        else:
            result.notes.append(f"{path}: resource {entry} is not a local file; not checked")
