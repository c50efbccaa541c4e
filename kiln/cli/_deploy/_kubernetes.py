"""Kiln workers in Kubernetes manifests, for ``kiln check-deploy``.

Owns reading pod templates: which containers run ``kiln worker``, their environment as
the kubelet builds it (envFrom in order, then env; ConfigMaps resolved when they are
among the files, Secrets never read), the pod's terminationGracePeriodSeconds, a
preStop hook's sleep (it runs before the signal, inside the same grace period), and
the ports that something outside the pod reaches (probes, declared ports), and the
autoscalers (KEDA ScaledObject, HorizontalPodAutoscaler) that scale a worker's workload:
each scale-in is a SIGTERM, so the grace rule checked here is what keeps it lossless.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kiln.cli._deploy._files import K8S_DEFAULT_GRACE, WORKLOADS, Worker, _argv, worker_args

PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def _pod_spec(document: dict[str, Any]) -> dict[str, Any] | None:
    spec = document.get("spec") or {}
    if document.get("kind") == "Pod":
        return spec if isinstance(spec, dict) else None
    if document.get("kind") == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    pod = (spec.get("template") or {}).get("spec")
    return pod if isinstance(pod, dict) else None


def manifest_workers(manifests: Iterable[tuple[str, dict[str, Any]]]) -> list[Worker]:
    manifests = list(manifests)
    config_maps = {
        str((d.get("metadata") or {}).get("name")): {k: str(v) for k, v in
                                                   (d.get("data") or {}).items()}
        for _, d in manifests if d.get("kind") == "ConfigMap"
    }
    scalers = _autoscalers(d for _, d in manifests)
    workers: list[Worker] = []
    for path, document in manifests:
        pod = _pod_spec(document) if document.get("kind") in WORKLOADS else None
        if pod is None:
            continue
        name = (document.get("metadata") or {}).get("name", "?")
        grace = pod.get("terminationGracePeriodSeconds")
        for container in pod.get("containers") or []:
            worker = _container_worker(path, f"{document['kind']} {name}", container, grace)
            if worker is not None:
                worker.environ = _environ(container, config_maps, worker)
                worker.before_stop = _pre_stop(container, worker)
                worker.exposed_ports = _exposed_ports(container)
                worker.liveness_window = _liveness_window(container)
                worker.notes += scalers.get((document["kind"], name), [])
                workers.append(worker)
    return workers


SCALERS = ("ScaledObject", "HorizontalPodAutoscaler")


def _autoscalers(documents: Iterable[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """(kind, name) of a scaled workload -> what to say about its autoscalers."""
    found: dict[tuple[str, str], list[str]] = {}
    for document in documents:
        if document.get("kind") not in SCALERS:
            continue
        spec = document.get("spec") or {}
        target = spec.get("scaleTargetRef") or {}
        low = spec.get("minReplicaCount", spec.get("minReplicas", 1))
        high = spec.get("maxReplicaCount", spec.get("maxReplicas", "?"))
        name = (document.get("metadata") or {}).get("name", "?")
        say = (f"scaled by {document['kind']} {name} ({low} to {high} replicas): each "
               "scale-in stops a worker with SIGTERM, within the grace period checked here")
        if low == 0:
            say += "; at 0 replicas no leader runs recurring jobs, rescues or pruning"
        key = (str(target.get("kind") or "Deployment"), str(target.get("name")))
        found.setdefault(key, []).append(say)
    return found


def _container_worker(
    path: str, owner: str, container: dict[str, Any], grace: Any
) -> Worker | None:
    command, args = _argv(container.get("command")), _argv(container.get("args"))
    found = worker_args(command + args)
    assumed = False
    if found is None and not command and args[:1] == ["worker"]:
        found, assumed = args[1:], True
    if found is None:
        return None
    worker = Worker(
        file=path, what=f"{owner}, container {container.get('name', '?')}",
        grace_name="terminationGracePeriodSeconds",
        grace=K8S_DEFAULT_GRACE if grace is None else float(grace),
        grace_default=grace is None, args=found, environ={},
    )
    if assumed:
        worker.notes.append("no command: assuming the image's entrypoint is kiln")
    return worker


def _environ(
    container: dict[str, Any], config_maps: dict[str, dict[str, str]], worker: Worker
) -> dict[str, str]:
    environ: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        if "configMapRef" in source:
            ref = str(source["configMapRef"].get("name"))
            if ref in config_maps:
                environ.update({prefix + k: v for k, v in config_maps[ref].items()})
            else:
                worker.notes.append(f"ConfigMap {ref} (envFrom) is not among the files: "
                                    "any ServerConfig it sets is not seen here")
        elif "secretRef" in source:
            worker.notes.append(f"Secret {source['secretRef'].get('name')} (envFrom) is not "
                                "read: keep ServerConfig out of Secrets")
    for item in container.get("env") or []:
        key = str(item.get("name"))
        if "value" in item:
            environ[key] = str(item["value"])
            continue
        key_ref = (item.get("valueFrom") or {}).get("configMapKeyRef") or {}
        data = config_maps.get(str(key_ref.get("name")), {})
        if key_ref and key_ref.get("key") in data:
            environ[key] = data[str(key_ref["key"])]
        else:
            environ.pop(key, None)
            worker.unreadable.append(key)
    return environ


def _pre_stop(container: dict[str, Any], worker: Worker) -> float:
    hook = (container.get("lifecycle") or {}).get("preStop") or {}
    if not hook:
        return 0.0
    if "sleep" in hook:
        return float(hook["sleep"].get("seconds", 0))
    script = " ".join(_argv((hook.get("exec") or {}).get("command")))
    match = re.fullmatch(r"(?:\S*/)?(?:sh|bash) -c (?:exec )?sleep ([0-9.]+)|"
                         r"(?:\S*/)?sleep ([0-9.]+)", script.strip())
    if match:
        return float(match.group(1) or match.group(2))
    worker.notes.append("a preStop hook runs before the signal and uses up part of the "
                        "grace period: its length is not known here")
    return 0.0


def _exposed_ports(container: dict[str, Any]) -> dict[int, list[str]]:
    """Ports that the kubelet or a scraper reaches on the pod's address, and why."""
    by_name = {str(p.get("name")): int(p["containerPort"])
               for p in container.get("ports") or [] if p.get("name")}
    exposed = {int(p["containerPort"]): [f"port {p.get('name') or p['containerPort']}"]
               for p in container.get("ports") or [] if "containerPort" in p}
    for probe_name in PROBES:
        action = (container.get(probe_name) or {}).get("httpGet")
        if action is None or "port" not in action:
            continue
        port = action["port"]
        number = by_name.get(str(port)) if isinstance(port, str) and not port.isdigit() \
            else int(port)
        if number is not None:
            exposed.setdefault(number, []).append(probe_name)
    return exposed


def _liveness_window(container: dict[str, Any]) -> float | None:
    """How long a liveness probe fails before the kubelet restarts the container."""
    probe = container.get("livenessProbe")
    if not probe:
        return None
    return float(probe.get("periodSeconds", 10)) * float(probe.get("failureThreshold", 3))
