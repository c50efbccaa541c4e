"""The Kubernetes base: every manifest passes kubernetes-validate (custom resources only
warn: their schemas are not in it), kustomize builds it where kubectl is present, and
the objects are wired the way the operator's guide asks."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.binaries import IN_CI, runner
from tests.support.deploy import KUBERNETES, ROOT, find, load, manifests

# PodMonitor, PrometheusRule, KEDA's ScaledObject: warned, not validated
ROOT_ALERTS = ROOT / "alerts"
CUSTOM = {"monitoring.coreos.com/v1", "keda.sh/v1alpha1"}
BUILT = {("Deployment", "kiln-worker"), ("Deployment", "kiln-dashboard"),
         ("Service", "kiln-dashboard"), ("Ingress", "kiln-dashboard"),
         ("Job", "kiln-migrate"), ("PodMonitor", "kiln-worker"),
         ("PrometheusRule", "kiln"), ("ConfigMap", "kiln-grafana-dashboards"),
         ("Deployment", "kiln-pgbouncer"), ("Service", "kiln-pgbouncer"),
         ("Deployment", "kiln-exporter"), ("PodMonitor", "kiln-exporter"),
         ("ScaledObject", "kiln-worker")}


def kubernetes_validate() -> Any:
    try:
        import kubernetes_validate as kv
    except ImportError:
        if IN_CI:
            pytest.fail("kubernetes-validate is missing: pip install -e '.[dev]'")
        pytest.skip("kubernetes-validate is not installed (pip install -e '.[dev]')")
    return kv


def validate(document: dict[str, Any]) -> str:
    """'ok', 'custom' (no schema: a warning), or raises kubernetes_validate's error."""
    kv = kubernetes_validate()
    try:
        kv.validate(document, kv.latest_version(), strict=True)
    except kv.SchemaNotFoundError:
        assert document["apiVersion"] in CUSTOM, document["apiVersion"]
        return "custom"
    return "ok"


@pytest.mark.parametrize(("path", "document"), manifests(),
                         ids=[f"{p.name}:{d['kind']}" for p, d in manifests()])
def test_manifest_is_valid(path: Path, document: dict[str, Any]) -> None:
    result = validate(document)
    assert result == ("custom" if document["apiVersion"] in CUSTOM else "ok")


def test_validation_can_fail() -> None:
    document = find("Deployment", "kiln-worker")
    container = document["spec"]["template"]["spec"]["containers"][0]
    container["readinessProbe"]["httpGet"]["portt"] = "health"
    kv = kubernetes_validate()
    with pytest.raises(kv.ValidationError, match="portt"):
        validate(document)


def test_kustomization_lists_every_manifest() -> None:
    listed = set(load(KUBERNETES / "kustomization.yaml")["resources"])
    shipped = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == shipped


def test_kustomize_builds_the_base(tmp_path: Path) -> None:
    kubectl = runner("kubectl", "https://kubernetes.io/docs/tasks/tools/", ci_needs=False)
    built = kubectl(["kustomize", str(KUBERNETES)])
    assert built.returncode == 0, built.stderr
    documents = [d for d in yaml.safe_load_all(built.stdout) if d]
    assert {(d["kind"], d["metadata"]["name"]) for d in documents} == BUILT
    for document in documents:
        assert document["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kiln"
        validate(document)
    # what an overlay would check: the built output, through stdin
    checked = subprocess.run([sys.executable, "-m", "kiln.cli", "check-deploy", "-"],
                             input=built.stdout, text=True, capture_output=True, timeout=60,
                             check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "1 passed, 0 failed" in checked.stdout


def _worker() -> tuple[dict[str, Any], dict[str, Any]]:
    pod = find("Deployment", "kiln-worker")["spec"]["template"]
    return pod, pod["spec"]["containers"][0]


def test_worker_probes_ports_and_resources() -> None:
    pod, container = _worker()
    env = {e["name"]: e for e in container["env"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"health": int(env["KILN_HEALTH_PORT"]["value"]),
                     "metrics": int(env["KILN_METRICS_PORT"]["value"])}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(ports["metrics"])
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    # through PgBouncer (the Secret's pooled-url), a pool of 2 each
    assert env["KILN_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "kiln-database", "key": "pooled-url"}
    assert env["KILN_MAX_CONNS"]["value"] == "2"
    assert "replicas" not in find("Deployment", "kiln-worker")["spec"]  # the ScaledObject's


def test_pod_monitor_scrapes_the_workers_metrics_port() -> None:
    monitor = find("PodMonitor", "kiln-worker")
    pod, container = _worker()
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    assert "metrics" in {p["name"] for p in container["ports"]}


def test_migration_job_and_dashboard() -> None:
    job = find("Job", "kiln-migrate")["spec"]["template"]["spec"]
    assert job["containers"][0]["command"] == ["kiln", "migrate"]
    assert job["restartPolicy"] in ("OnFailure", "Never")
    dashboard = find("Deployment", "kiln-dashboard")["spec"]["template"]
    container = dashboard["spec"]["containers"][0]
    assert container["command"][:2] == ["kiln", "dashboard"]
    env = {e["name"]: e for e in container["env"]}
    assert "secretKeyRef" in env["KILN_DASHBOARD_TOKEN"]["valueFrom"]  # never a literal
    service = find("Service", "kiln-dashboard")
    assert service["spec"]["selector"].items() <= dashboard["metadata"]["labels"].items()
    # behind the TLS Ingress: its name is allowed, its controller's forwarded headers believed
    ingress = find("Ingress", "kiln-dashboard")["spec"]
    [rule] = ingress["rules"]
    assert rule["http"]["paths"][0]["backend"]["service"]["name"] == "kiln-dashboard"
    assert rule["host"] in ingress["tls"][0]["hosts"]
    flags = container["command"]
    assert flags[flags.index("--allowed-host") + 1] == rule["host"]
    assert "--trusted-proxy" in flags
    # the dashboard calls servers dead when the workers do
    _, worker = _worker()
    dead_after = next(e["value"] for e in worker["env"] if e["name"] == "KILN_DEAD_AFTER")
    flags = container["command"]
    assert f"{flags[flags.index('--dead-after') + 1]}s" == dead_after


def _env(kind: str, name: str) -> dict[str, Any]:
    container = find(kind, name)["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container.get("env", [])}


def test_pgbouncer_in_transaction_mode_in_front_of_the_direct_url() -> None:
    env = _env("Deployment", "kiln-pgbouncer")
    assert env["POOL_MODE"]["value"] == "transaction"
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "kiln-database", "key": "url"}
    service = find("Service", "kiln-pgbouncer")
    pod = find("Deployment", "kiln-pgbouncer")["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    [port] = service["spec"]["ports"]
    assert port["port"] == int(env["LISTEN_PORT"]["value"])
    # migrations and the exporter go direct, never through the pooler
    for kind, name in (("Job", "kiln-migrate"), ("Deployment", "kiln-exporter")):
        assert _env(kind, name)["KILN_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "url"


def test_the_scaled_object_scales_the_workers_on_the_exporter_s_series() -> None:
    """KEDA scales kiln-worker on series the shipped recording rules make from what kiln
    exporter publishes (scraped by its PodMonitor), one worker's slots per replica."""
    scaled = find("ScaledObject", "kiln-worker")["spec"]
    worker = find("Deployment", "kiln-worker")
    assert scaled["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                        "name": worker["metadata"]["name"]}
    assert scaled["minReplicaCount"] >= 1  # the leader's recurring jobs and rescues
    [trigger] = scaled["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    recorded = {r["record"] for g in load(ROOT_ALERTS / "kiln.recording.yml")["groups"]
                for r in g["rules"] if "record" in r}
    used = set(re.findall(r"\b(queue[a-z_]*:[a-z_:]+)\{", query))
    assert used and used <= recorded, used - recorded
    # `kiln worker jobs:app` runs 10 slots per queue: one replica per 10 jobs
    assert trigger["metadata"]["threshold"] == "10"
    exporter = find("Deployment", "kiln-exporter")["spec"]["template"]
    command = exporter["spec"]["containers"][0]["command"]
    assert command[:2] == ["kiln", "exporter"]
    assert 'queue="default"' in query and command[command.index("--queue") + 1] == "default"
    monitor = find("PodMonitor", "kiln-exporter")["spec"]
    assert monitor["selector"]["matchLabels"].items() <= exporter["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["podMetricsEndpoints"]] == ["metrics"]
