"""Generated artifacts: the PrometheusRule and the dashboards ConfigMap are what
``python -m deploy.generate`` writes from alerts/ and dashboards/; stale ones fail."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from deploy import generate
from tests.support.deploy import KUBERNETES, ROOT, load


def test_generated_files_are_current() -> None:
    done = subprocess.run([sys.executable, "-m", "deploy.generate", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{done.stderr}run: python -m deploy.generate"


def test_stale_files_fail_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    for path in generate.artifacts():
        (tmp_path / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(generate, "KUBERNETES", tmp_path)
    assert generate.main(["--check"]) == 0
    rule = tmp_path / "prometheusrule.yaml"
    rule.write_text(rule.read_text().replace("for: 5m", "for: 6m", 1), encoding="utf-8")
    assert generate.main(["--check"]) == 1
    assert "prometheusrule.yaml is stale" in capsys.readouterr().err
    (tmp_path / "grafana-dashboards.yaml").unlink()
    assert generate.main(["--check"]) == 1
    assert generate.main([]) == 0 and generate.main(["--check"]) == 0


def test_prometheus_rule_holds_the_shipped_groups() -> None:
    rule = load(KUBERNETES / "prometheusrule.yaml")
    assert rule["kind"] == "PrometheusRule"
    groups = [g for path in generate.RULE_FILES
              for g in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]]
    assert rule["spec"]["groups"] == groups
    assert any(r.get("alert") == "KilnJobsFailed" for g in groups for r in g["rules"])


def test_dashboards_config_map_for_the_sidecar() -> None:
    config_map = load(KUBERNETES / "grafana-dashboards.yaml")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = sorted((ROOT / "dashboards").glob("*.json"))
    assert sorted(config_map["data"]) == [p.name for p in shipped]
    for path in shipped:
        assert json.loads(config_map["data"][path.name]) == json.loads(path.read_text())
