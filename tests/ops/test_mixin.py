"""The monitoring mixin: what is checked in is what it generates, and its config does
what it says (deployment labels, per-queue thresholds, runbook base URL), checked with
promtool on the generated rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mixin import build, rules
from mixin.config import Config, LatencySLO
from tests.ops import promql
from tests.ops.conftest import Run


def test_checked_in_files_are_the_mixins_output() -> None:
    assert build.stale() == [], "run python -m mixin"
    assert build.main(["--check"]) == 0


def test_the_freshness_check_names_a_file_that_drifted(tmp_path: Path) -> None:
    config = Config()
    build.write(config, tmp_path)
    assert build.stale(config, tmp_path) == []
    rules = tmp_path / "alerts" / "kiln.rules.yml"
    rules.write_text(rules.read_text().replace("> 600", "> 900"), encoding="utf-8")
    (tmp_path / "dashboards" / "kiln-overview.json").unlink()
    assert build.stale(config, tmp_path) == [
        "alerts/kiln.rules.yml", "dashboards/kiln-overview.json"]


def test_config_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="unknown thresholds"):
        Config(thresholds={"oldest": 1})
    with pytest.raises(ValueError, match="cannot be set per queue"):
        Config(queue_thresholds={"mail": {"results_pending": 1}})
    with pytest.raises(ValueError, match="deployment_labels"):
        Config(deployment_labels=("bad-label",))


OVERRIDES = Path(__file__).with_name("overrides.promtool.yml")


def test_per_queue_thresholds_deployment_labels_and_runbook_base(
    tmp_path: Path, promtool: Run
) -> None:
    config = Config(
        selector='job="kiln"', deployment_labels=("cluster", "job"),
        thresholds={"oldest_available_seconds": 450},
        queue_thresholds={"reports": {"oldest_available_seconds": 3600},
                          "mail": {"oldest_available_seconds": 300}},
        runbook_url_base="https://runbooks.example.com/kiln",
    )
    build.write(config, tmp_path)
    rules = [tmp_path / "alerts" / "kiln.recording.yml", tmp_path / "alerts" / "kiln.rules.yml"]
    result = promtool(["check", "rules", *map(str, rules)])
    assert result.returncode == 0, result.stdout + result.stderr
    for path in rules:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                assert "namespace" not in rule["expr"], rule  # the labels are the config's
                if "alert" in rule:
                    assert rule["annotations"]["runbook_url"].startswith("https://")
    test = tmp_path / "overrides.yml"
    test.write_text(OVERRIDES.read_text(encoding="utf-8"), encoding="utf-8")
    result = promtool(["test", "rules", str(test)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_of_the_default_config_is_in_the_shipped_file() -> None:
    shipped = {a["alert"] for a in promql.alerts()}
    _header, generated = rules.document(Config())
    assert {r["alert"] for g in generated["groups"] for r in g["rules"]} == shipped


SLO_OVERRIDES = Path(__file__).with_name("slo_overrides.promtool.yml")


def test_per_kind_failure_objectives_and_per_queue_latency_slos(
    tmp_path: Path, promtool: Run
) -> None:
    """A kind with its own objective pages on a failure rate the default tolerates; a
    queue with its own latency SLO reads its own histogram bucket."""
    config = Config(selector='job="kiln"', deployment_labels=("job",),
                    kind_failure_objectives={"payments.charge": 0.999},
                    queue_latency_slos={"reports": LatencySLO(seconds=300, objective=0.95)})
    build.write(config, tmp_path)
    test = tmp_path / "slo.yml"
    test.write_text(SLO_OVERRIDES.read_text(encoding="utf-8"), encoding="utf-8")
    result = promtool(["test", "rules", str(test)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_slo_config_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="not a claim-latency bucket bound"):
        LatencySLO(seconds=45)
    with pytest.raises(ValueError, match="between 0 and 1"):
        LatencySLO(objective=99)
    with pytest.raises(ValueError, match=r"kind_failure_objectives\['pay'\]"):
        Config(kind_failure_objectives={"pay": 1.0})
    with pytest.raises(ValueError, match="failure_objective"):
        Config(failure_objective=0)
    with pytest.raises(ValueError, match=r"queue_latency_slos\['reports'\]: a LatencySLO"):
        Config(queue_latency_slos={"reports": 300})  # type: ignore[dict-item]


def test_the_slo_example_of_the_docs_builds_valid_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, promtool: Run
) -> None:
    doc = (promql.ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    (example,) = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S)
                  if "kind_failure_objectives" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "docs/observability.md", "exec"), {})
    out = tmp_path / "out" / "alerts"
    rules = out / "kiln.rules.yml"
    assert 'kiln_job_kind="payments.charge"' in rules.read_text()
    result = promtool(["check", "rules", str(out / "kiln.recording.yml"), str(rules)])
    assert result.returncode == 0, result.stdout + result.stderr
