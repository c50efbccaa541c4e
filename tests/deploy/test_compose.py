"""The compose stack: ``docker-compose config -q`` accepts it offline (no daemon), the
services the guide lists are there and wired together, and the Prometheus and
Alertmanager configurations it mounts pass promtool and amtool inside the layout the
containers see."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.support.binaries import runner
from tests.support.deploy import COMPOSE, COMPOSE_ENV, PROMETHEUS, ROOT, load

SERVICES = {"postgres", "pgbouncer", "migrate", "worker-1", "worker-2", "dashboard",
            "exporter", "prometheus", "alertmanager", "grafana"}


def compose_tool() -> Any:
    return runner("docker-compose", "apt-get install docker-compose", env=COMPOSE_ENV)


def test_docker_compose_accepts_the_file() -> None:
    result = compose_tool()(["-f", str(COMPOSE), "config", "-q"])
    assert result.returncode == 0, result.stderr


def test_docker_compose_rejects_a_broken_copy(tmp_path: Path) -> None:
    document = load(COMPOSE)
    document["services"]["worker-1"]["stop_grace"] = "45s"
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(document), encoding="utf-8")
    result = compose_tool()(["-f", str(broken), "config", "-q"])
    assert result.returncode != 0
    assert "stop_grace" in result.stderr


def test_services_and_their_order() -> None:
    services = load(COMPOSE)["services"]
    assert set(services) == SERVICES
    for worker in ("worker-1", "worker-2"):
        assert services[worker]["command"][:2] == ["kiln", "worker"]
        assert services[worker]["depends_on"]["migrate"]["condition"] == \
            "service_completed_successfully"
    assert services["migrate"]["command"] == ["kiln", "migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["dashboard"]["command"][:2] == ["kiln", "dashboard"]


def mounts(service: str) -> dict[str, Path]:
    """Container path: host path, for the service's bind mounts of files in the repo."""
    found: dict[str, Path] = {}
    for volume in load(COMPOSE)["services"][service]["volumes"]:
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            found[target] = (COMPOSE.parent / source).resolve()
    return found


def container_tree(service: str, root: Path) -> Path:
    """The service's bind mounts copied to where the container sees them, under root."""
    for target, source in mounts(service).items():
        assert source.exists(), f"{service} mounts {source}, which does not exist"
        destination = root / target.lstrip("/")
        destination.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, destination)
        else:
            shutil.copy(source, destination)
    return root


def test_prometheus_config_with_the_shipped_rules(tmp_path: Path) -> None:
    promtool = runner("promtool", "apt-get install prometheus")
    assert mounts("prometheus")["/etc/prometheus/prometheus.yml"] == PROMETHEUS
    tree = container_tree("prometheus", tmp_path)
    result = promtool(["check", "config", str(tree / "etc/prometheus/prometheus.yml")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rule files found" in result.stdout + result.stderr
    assert (tree / "etc/prometheus/rules/kiln.rules.yml").read_text() == \
        (ROOT / "alerts/kiln.rules.yml").read_text()


def test_prometheus_scrapes_both_workers_and_the_exporter() -> None:
    services = load(COMPOSE)["services"]
    config = load(PROMETHEUS)
    kiln = next(j for j in config["scrape_configs"] if j["job_name"] == "kiln")
    targets = {t for c in kiln["static_configs"] for t in c["targets"]}
    exporter = services["exporter"]["command"]
    assert exporter[:2] == ["kiln", "exporter"]
    assert targets == {f"{name}:{services[name]['environment']['KILN_METRICS_PORT']}"
                       for name in ("worker-1", "worker-2")} | {
                           f"exporter:{exporter[exporter.index('--port') + 1]}"}
    for name in ("worker-1", "worker-2"):
        assert services[name]["environment"]["KILN_METRICS_HOST"] == "0.0.0.0"
    alertmanager = config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    assert alertmanager == ["alertmanager:9093"]


def test_alertmanager_runs_the_example_routing(tmp_path: Path) -> None:
    amtool = runner("amtool", "apt-get install prometheus-alertmanager")
    source = mounts("alertmanager")["/etc/alertmanager/alertmanager.yml"]
    assert source == ROOT / "alerts" / "alertmanager.example.yml"
    result = amtool(["check-config", str(source)])
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "alertmanager.yml"
    broken.write_text(source.read_text().replace("receiver: kiln-chat", "receiver: nobody", 1))
    assert amtool(["check-config", str(broken)]).returncode != 0


def test_grafana_provisions_the_dashboards_and_the_data_source() -> None:
    found = mounts("grafana")
    provider = yaml.safe_load(found["/etc/grafana/provisioning/dashboards/kiln.yml"]
                              .read_text())["providers"][0]
    assert provider["options"]["path"] in found  # the folder it reads is the one mounted
    assert sorted(found[provider["options"]["path"]].glob("*.json"))
    datasource = yaml.safe_load(found["/etc/grafana/provisioning/datasources/kiln.yml"]
                                .read_text())["datasources"][0]
    assert datasource["type"] == "prometheus" and datasource["isDefault"] is True
    assert datasource["url"] == "http://prometheus:9090"


def test_workers_go_through_pgbouncer_in_transaction_mode() -> None:
    """The workers' URL is PgBouncer's with pooler=transaction and a pool of 2; the
    migration, the dashboard and the exporter go direct; PgBouncer pools transactions."""
    services = load(COMPOSE)["services"]
    bouncer = services["pgbouncer"]["environment"]
    assert bouncer["POOL_MODE"] == "transaction"
    for name in ("worker-1", "worker-2"):
        env = services[name]["environment"]
        assert f"@pgbouncer:{bouncer['LISTEN_PORT']}/" in env["KILN_DATABASE_URL"]
        assert env["KILN_DATABASE_URL"].endswith("?pooler=transaction")
        assert env["KILN_MAX_CONNS"] == "2"
        assert "pgbouncer" in services[name]["depends_on"]
    for name in ("migrate", "dashboard", "exporter"):
        assert "@postgres:5432/" in services[name]["environment"]["KILN_DATABASE_URL"]
