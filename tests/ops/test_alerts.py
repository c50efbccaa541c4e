"""The shipped alert and recording rules: promtool accepts and unit-tests them, every
alert follows the conventions, every name comes from kilnotel, and the Alertmanager
example routes the failed-job alerts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops import promql
from tests.support.binaries import Run

SEVERITIES = {"critical", "warning", "info"}
ALERT_NAMES = [a["alert"] for a in promql.alerts()]
REQUIRED = {
    # alert: what the issue asked for it to cover
    "KilnJobsFailed": "new failures for good (rate, re-notifies)",
    "KilnFailedJobsPresent": "failed jobs present (info)",
    "KilnJobFailureRatioHigh": "failure ratio high",
    "KilnQueueBacklogGrowing": "queue backlog growing",
    "KilnQueueStalled": "available but nothing completing",
    "KilnOldestJobTooOld": "oldest available job too old",
    "KilnClaimLatencyHigh": "claim latency p99 high",
    "KilnNoServerAlive": "work waiting and no healthy server serves it (scale to zero safe)",
    "KilnQueueStateUnknown": "nothing publishes a deployment's queue state",
    "KilnNoLeader": "no leader",
    "KilnLeaderFlapping": "leader flapping",
    "KilnJobsRescued": "jobs being rescued",
    "KilnServerFenced": "servers fenced",
    "KilnServerUnhealthy": "servers unhealthy",
    "KilnResultsPilingUp": "results piling up",
    "KilnDatabaseErrors": "database errors",
    "KilnAdmissionFallingBehind": "rate-limit admission falling behind",
    "KilnWorkerDown": "a scrape target down",
    "KilnCountsStale": "database-wide counts not refreshed",
    "KilnMetricsOverflow": "series folded into otel_metric_overflow",
    "KilnSeveralLeaders": "two leaders in one deployment",
    "KilnJobFailureBudgetBurning": "per-kind failure budget, fast burn (1h/5m, 6h/30m)",
    "KilnJobFailureBudgetSlowBurn": "per-kind failure budget, slow burn (1d/2h, 3d/6h)",
    "KilnClaimLatencyBudgetBurning": "queue-latency SLO, fast burn",
    "KilnClaimLatencyBudgetSlowBurn": "queue-latency SLO, slow burn",
}


def test_promtool_check_rules(promtool: Run) -> None:
    result = promtool(["check", "rules", *map(str, promql.RULE_FILES)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_there_are_promtool_unit_tests() -> None:
    assert len(promql.ALERT_TESTS) >= 13, "promtool tests missing from alerts/tests"


@pytest.mark.timeout(240)  # slo.yml and tables.yml take 13 s each on a quiet machine
@pytest.mark.parametrize("path", promql.ALERT_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(promtool: Run, path: Path) -> None:
    """One promtool run per file, so that xdist spreads them over its workers."""
    result = promtool(["test", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == 1, result.stdout


def test_required_alerts_exist() -> None:
    missing = {name: why for name, why in REQUIRED.items() if name not in ALERT_NAMES}
    assert not missing
    # an SLO alert is one rule per window pair (each with its for:), told apart by "long"
    rules = [(a["alert"], a["labels"].get("long")) for a in promql.alerts()]
    assert len(rules) == len(set(rules)), "duplicate alert names"


@pytest.mark.parametrize("alert", promql.alerts(), ids=ALERT_NAMES)
def test_alert_conventions(alert: dict[str, Any]) -> None:
    assert re.fullmatch(r"Kiln[A-Z][A-Za-z]+", alert["alert"])
    assert alert["labels"]["severity"] in SEVERITIES
    notes = alert["annotations"]
    assert notes["summary"].strip() and notes["description"].strip()
    anchor = alert["alert"].lower()
    assert notes["runbook_url"] == f"docs/runbooks.md#{anchor}"
    assert anchor in promql.runbook_anchors(), f"docs/runbooks.md has no section {anchor}"


def test_every_runbook_section_is_an_alert() -> None:
    assert promql.runbook_anchors() == {name.lower() for name in ALERT_NAMES}


@pytest.mark.parametrize("rule", list(promql.rules()),
                         ids=lambda r: r.get("alert") or r["record"])
def test_rule_expressions(rule: dict[str, Any]) -> None:
    """Names from kilnotel or recorded, counters only under rate/increase, max over
    database-wide gauges."""
    assert promql.problems(rule["expr"]) == []
    assert promql.metric_names(rule["expr"]), "an expression without any metric"


@pytest.mark.parametrize("rule", list(promql.rules()),
                         ids=lambda r: r.get("alert") or r["record"])
def test_rules_are_per_deployment(rule: dict[str, Any]) -> None:
    """Every aggregation keeps the deployment labels and no absent() is left: several
    kiln deployments on one Prometheus never merge (alerts/tests/deployments.yml runs
    two)."""
    assert promql.unscoped_aggregations(rule["expr"]) == []


def test_recording_rules_follow_the_naming_convention() -> None:
    for name in promql.recorded_names():
        level, metric, ops = name.split(":")
        assert level and ops and "kiln" in f"{level}_{metric}", name


def _alert_cases() -> dict[str, tuple[int, int]]:
    """alert -> (firing checks, quiet checks) over every promtool test file."""
    cases: dict[str, tuple[int, int]] = {}
    for path in promql.ALERT_TESTS:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for check in test.get("alert_rule_test", []):
                firing, quiet = cases.get(check["alertname"], (0, 0))
                if check.get("exp_alerts"):
                    firing += 1
                else:
                    quiet += 1
                cases[check["alertname"]] = (firing, quiet)
    return cases


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    cases = _alert_cases()
    untested = [a for a in ALERT_NAMES if cases.get(a, (0, 0))[0] == 0]
    never_quiet = [a for a in ALERT_NAMES if cases.get(a, (0, 0))[1] == 0]
    assert untested == [] and never_quiet == []
    assert set(cases) <= set(ALERT_NAMES), "a test names an alert that does not exist"


def test_firing_tests_check_every_annotation() -> None:
    """promtool compares annotations in full, so a firing case checks the rendered text."""
    for path in promql.ALERT_TESTS:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for check in test.get("alert_rule_test", []):
                for expected in check.get("exp_alerts") or []:
                    assert set(expected["exp_annotations"]) == {
                        "summary", "description", "runbook_url"}, (path.name, check)


def test_alertmanager_inhibitions_stay_within_a_deployment() -> None:
    """An inhibition without the deployment labels in ``equal`` lets one deployment's
    outage silence another's alerts."""
    config = yaml.safe_load((promql.ALERTS / "alertmanager.example.yml").read_text())
    assert config["inhibit_rules"]
    for rule in config["inhibit_rules"]:
        assert set(promql.DEPLOYMENT_LABELS) <= set(rule.get("equal", [])), rule
    assert set(promql.DEPLOYMENT_LABELS) <= set(config["route"]["group_by"])


def test_alertmanager_example_is_valid(amtool: Run) -> None:
    config = str(promql.ALERTS / "alertmanager.example.yml")
    result = amtool(["check-config", config])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("labels", "receiver"), [
    (["alertname=KilnJobsFailed", "severity=warning", "queue=mail"], "kiln-failed-jobs"),
    (["alertname=KilnFailedJobsPresent", "severity=info", "queue=mail"], "kiln-chat"),
    (["alertname=KilnNoServerAlive", "severity=critical"], "kiln-pager"),
    (["alertname=KilnJobsRescued", "severity=warning", "queue=mail"], "kiln-chat"),
])
def test_alertmanager_routes_failed_jobs(amtool: Run, labels: list[str], receiver: str) -> None:
    config = str(promql.ALERTS / "alertmanager.example.yml")
    result = amtool(["config", "routes", "test", f"--config.file={config}",
                     f"--verify.receivers={receiver}", *labels])
    assert result.returncode == 0, result.stdout + result.stderr
