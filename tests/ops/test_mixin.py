"""The monitoring mixin: what is checked in is what it generates, and its config does
what it says (deployment labels, per-queue thresholds, runbook base URL), checked with
promtool on the generated rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kilnotel.mixin import build, rules
from kilnotel.mixin.config import Config, LatencySLO
from tests.ops import promql
from tests.support.binaries import Run
from tests.support.docblocks import code_blocks


def test_checked_in_files_are_the_mixins_output() -> None:
    assert build.stale(promql.ROOT) == [], "run python -m mixin"
    assert build.main(["--check", "--out", str(promql.ROOT)]) == 0


def test_the_freshness_check_names_a_file_that_drifted(tmp_path: Path) -> None:
    config = Config()
    build.write(config, tmp_path)
    assert build.stale(tmp_path, config) == []
    rules = tmp_path / "alerts" / "kiln.rules.yml"
    rules.write_text(rules.read_text().replace("> 600", "> 900"), encoding="utf-8")
    (tmp_path / "dashboards" / "kiln-overview.json").unlink()
    assert build.stale(tmp_path, config) == [
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
    (example,) = [b for b in code_blocks("observability.md") if "kind_failure_objectives" in b]
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "docs/observability.md", "exec"), {})
    out = tmp_path / "out" / "alerts"
    rules = out / "kiln.rules.yml"
    assert 'kiln_job_kind="payments.charge"' in rules.read_text()
    result = promtool(["check", "rules", str(out / "kiln.recording.yml"), str(rules)])
    assert result.returncode == 0, result.stdout + result.stderr


ROUTING = """\
# a mixin config file, as an operator writes one
deployment_labels: [namespace, job]
thresholds: {oldest_available_seconds: 450}
queue_thresholds:
  reports: {oldest_available_seconds: 3600}
alert_extra_labels: {team: payments, page_via: opsgenie}
alert_extra_annotations:
  playbook: "https://wiki.example.com/oncall/kiln?queue={{ $labels.queue }}"
runbook_url_pattern: "https://wiki.example.com/kiln/runbooks/{alert}"
dashboard_url_pattern: "https://grafana.example.com/d/{uid}"
dashboard_uid: kiln-payments
dashboard_tags: [kiln, payments]
dashboard_links:
  - {title: Payments runbook, url: "https://wiki.example.com/payments"}
latency_slo: {seconds: 60, objective: 0.95}
"""


def test_the_installed_mixin_renders_from_a_config_file(tmp_path: Path, promtool: Run) -> None:
    """python -m kilnotel.mixin --config FILE --out DIR, run outside the repository (the
    installed package, M-10): routing hooks in every alert, the board's own settings,
    and promtool accepts the rules."""
    import json
    import os
    import subprocess
    import sys

    config = tmp_path / "kiln-mixin.yml"
    config.write_text(ROUTING, encoding="utf-8")
    out = tmp_path / "monitoring"
    env = {**os.environ, "PYTHONPATH": str(promql.ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "kilnotel.mixin", "--config", str(config), "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    rule_files = [out / "alerts" / "kiln.recording.yml", out / "alerts" / "kiln.rules.yml"]
    result = promtool(["check", "rules", *map(str, rule_files)])
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = [rule for group in yaml.safe_load(rule_files[1].read_text())["groups"]
              for rule in group["rules"]]
    assert len(alerts) == len(promql.alerts())
    for rule in alerts:
        assert rule["labels"]["team"] == "payments", rule["alert"]
        assert rule["labels"]["page_via"] == "opsgenie"
        notes = rule["annotations"]
        assert notes["runbook_url"] == f"https://wiki.example.com/kiln/runbooks/{rule['alert']}"
        assert notes["dashboard_url"] == "https://grafana.example.com/d/kiln-payments"
        assert notes["playbook"].endswith("queue={{ $labels.queue }}")
    board = json.loads((out / "dashboards" / "kiln-overview.json").read_text())
    assert board["uid"] == "kiln-payments" and board["tags"] == ["kiln", "payments"]
    assert [(link["title"], link["url"]) for link in board["links"]] == [
        ("Payments runbook", "https://wiki.example.com/payments")]
    # --check against what was just written: nothing stale; one edit is named
    check = [sys.executable, "-m", "kilnotel.mixin", "--config", str(config), "--out",
             str(out), "--check"]
    assert subprocess.run(check, cwd=tmp_path, env=env, timeout=60).returncode == 0
    rule_files[1].write_text(rule_files[1].read_text().replace("> 450", "> 900"))
    stale = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=60)
    assert stale.returncode == 1 and "alerts/kiln.rules.yml" in stale.stderr


@pytest.mark.parametrize(("text", "words"), [
    ("colour: blue\n", "unknown mixin config keys ['colour']"),
    ("alert_extra_labels: {severity: low}\n", "'severity' is set by the rules"),
    ("runbook_url_pattern: 'https://x/{name}'\n", "may use only {alert}, {anchor}"),
    ("dashboard_links: [{title: x}]\n", "dashboard_links"),
    ("latency_slo: {seconds: 7}\n", "not a claim-latency bucket bound"),
])
def test_a_bad_config_file_exits_2_naming_the_key(
    tmp_path: Path, text: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bad.yml"
    config.write_text(text, encoding="utf-8")
    assert build.main(["--config", str(config), "--out", str(tmp_path)]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "alerts").exists()


def test_summaries_name_the_deployment_without_repeating_it() -> None:
    """With namespace and job as deployment labels and a PodMonitor's job names
    (job="prod/kiln-worker"), a summary read "prod/prod/kiln-worker" (L-5)."""
    _header, document = rules.document(Config(deployment_labels=("namespace", "job")))
    summaries = [r["annotations"]["summary"] for g in document["groups"] for r in g["rules"]]
    where = "deployment namespace={{ $labels.namespace }} job={{ $labels.job }}"
    assert all(where in s for s in summaries), [s for s in summaries if where not in s]
    assert not any("{{ $labels.namespace }}/{{ $labels.job }}" in s for s in summaries)
    _header, default = rules.document(Config())
    assert all("installation {{ $labels.kiln_installation }}" in r["annotations"]["summary"]
               for g in default["groups"] for r in g["rules"])


def test_kiln_mixin_is_the_same_command(tmp_path: Path) -> None:
    from kiln.cli import run

    config = tmp_path / "kiln-mixin.yml"
    config.write_text("alert_extra_labels: {team: payments}\n", encoding="utf-8")
    out = tmp_path / "out"
    assert run(["mixin", "--config", str(config), "--out", str(out)]) == 0
    assert build.stale(out, Config(alert_extra_labels={"team": "payments"})) == []
    assert run(["mixin", "--out", str(out), "--check"]) == 1  # the defaults differ


def test_runbook_links_follow_the_config() -> None:
    assert Config().runbook("KilnNoLeader") == "docs/runbooks.md#kilnnoleader"
    assert Config(kiln_dashboard_url="https://kiln.example.com/").runbook(
        "KilnNoLeader") == "https://kiln.example.com/runbooks#kilnnoleader"
    assert Config(kiln_dashboard_url="https://kiln.example.com",
                  runbook_url_pattern="https://wiki/{alert}").runbook(
        "KilnNoLeader") == "https://wiki/KilnNoLeader"
    with pytest.raises(ValueError, match="kiln_dashboard_url"):
        Config(kiln_dashboard_url="kiln.example.com")
