"""Structural lint of the shipped Grafana dashboards, without Grafana: the generator's
output is what is checked in, and every panel follows the conventions of a current,
file-provisionable classic dashboard. The queries themselves run against a real
Prometheus in test_live_prometheus.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kilnotel import _names as names
from tests.ops import promql

BOARDS = promql.DASHBOARDS
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
QUERIES = promql.panel_queries()
# label -> the Grafana variable that must filter it wherever a metric carries it
FILTERS = {"queue": "$queue", "kiln_job_kind": "$kind"}
# every recorded series carries the deployment labels, each filtered by its own variable;
# a raw series does not carry the installation (only kiln_build_info does): it is
# filtered by $instance, the installation's targets (a variable chained to it)
DEPLOYMENT = {label: f"${label}" for label in promql.DEPLOYMENT_LABELS}
RAW_SCOPE = {"instance": "$instance"}
NOT_PANELS = {"A worker's own view", "The dashboard", "The web dashboard", "Worker logs",
              "critical", "warning", "info"}


def test_checked_in_json_is_the_generators_output() -> None:
    builder = promql.load_builder()
    assert set(BOARDS) == set(builder.DASHBOARDS), "a dashboard without a generator"
    for path, build in builder.DASHBOARDS.items():
        assert path.read_text(encoding="utf-8") == builder.render(build), (
            f"{path.name} is out of date: run python dashboards/build.py")
    assert builder.main(["--check"]) == 0


@pytest.fixture(params=BOARDS, ids=lambda p: p.name)
def board(request: pytest.FixtureRequest) -> dict[str, Any]:
    path: Path = request.param
    return promql.dashboard(path)


def test_dashboard_model(board: dict[str, Any]) -> None:
    assert board["schemaVersion"] == 41
    assert board["uid"] and board["title"] and board.get("id") is None
    assert "__inputs" not in board, "file provisioning ignores __inputs"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("queue", "kind"):
        var = variables[name]
        assert var["type"] == "query" and var["datasource"] == DATASOURCE
        assert var["includeAll"] and var["multi"] and var["allValue"] == ".*"
    for name in promql.DEPLOYMENT_LABELS:  # one deployment at a time, "All" allowed
        var = variables[name]
        assert var["type"] == "query" and not var["multi"] and var["allValue"] == ".*"
    # its targets: "All" is every target of the chosen installation, never every target
    instance = variables["instance"]
    assert instance["multi"] and instance["includeAll"] and "allValue" not in instance
    assert "$kiln_installation" in instance["query"]


def test_variable_queries_use_kilnotel_names(board: dict[str, Any]) -> None:
    for name, selector, label in promql.variable_queries(board):
        (metric,) = promql.metric_names(selector)
        assert metric in promql.known_names(), name
        if label not in DEPLOYMENT and label not in RAW_SCOPE:  # target labels: all have them
            assert label in _labels_of(metric), f"{name}: {metric} has no label {label}"


def test_panel_ids_are_unique(board: dict[str, Any]) -> None:
    ids = [p["id"] for p in board["panels"]]
    ids += [c["id"] for p in board["panels"] for c in p.get("panels", [])]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids))


def test_grid_positions_fit_24_columns_without_overlap(board: dict[str, Any]) -> None:
    taken: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["y"] >= 0
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                 for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells


def test_every_panel_is_complete(board: dict[str, Any]) -> None:
    for panel in promql.panels(board):
        title = panel["title"]
        assert panel["datasource"] == DATASOURCE, title
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{title}: no unit"
        if panel["type"] == "heatmap":
            assert panel["options"]["yAxis"].get("unit"), f"{title}: no y-axis unit"
        assert panel.get("description", "").strip(), f"{title}: no description"
        targets = panel["targets"]
        assert targets, f"{title}: no query"
        assert len({t["refId"] for t in targets}) == len(targets), title
        for t in targets:
            assert t["datasource"] == DATASOURCE, title
    titles = [p["title"] for p in promql.panels(board)]
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize("query", QUERIES, ids=[q.label for q in QUERIES])
def test_panel_query(query: promql.PanelQuery) -> None:
    """Parses; names from kilnotel or recorded; counters only under rate/increase and
    every _total under one; max over database-wide gauges; $__rate_interval as every
    range; $queue/$kind on every metric that carries the label; the deployment
    variables on every series and the deployment labels in every aggregation."""
    assert promql.problems(query.expr) == []
    ranges = re.findall(r"\[([^\]]*)\]", query.expr)
    assert all(r == "$__rate_interval" for r in ranges), ranges
    assert promql.unscoped_aggregations(query.expr) == []
    for selector in promql.selectors(query.expr, keep_template_variables=True):
        matchers = {(m.name, m.value) for m in selector.matchers.matchers}
        recorded = ":" in (selector.name or "")
        for label, variable in (DEPLOYMENT if recorded else RAW_SCOPE).items():
            assert (label, variable) in matchers, f"{selector.name}: no {label}=~{variable}"
        labels = _labels_of(selector.name or "")
        matchers = {(m.name, m.value) for m in selector.matchers.matchers}
        for label, variable in FILTERS.items():
            if label in labels:
                assert (label, variable) in matchers, f"{selector.name}: no {label}=~{variable}"


def _labels_of(name: str) -> tuple[str, ...]:
    """The labels of a kilnotel sample, or the labels a recorded series' level names."""
    for metric in names.METRICS:
        if name in metric.prometheus_samples:
            return metric.prometheus_labels
    level = name.split(":")[0] if ":" in name else ""
    return tuple(part for part in level.split("_") if part in FILTERS)


def test_every_metric_family_is_on_the_dashboard() -> None:
    """Each family kilnotel exports is charted somewhere (or deliberately left out)."""
    left_out = {
        "kiln_events_dropped_total": "alert KilnEventsDropped only",
        names.JOBS_STRANDED.prometheus_name: "alert KilnJobsStranded only",
        names.RATE_KEYS_UNDECLARED.prometheus_name: "alert KilnRateKeysUndeclared only",
        names.JOBS_UNHANDLED.prometheus_name: "alert KilnJobsUnhandled only",
        **{names.JOBS_BY_STATE[s].prometheus_name: "through queue_state:kiln_jobs:max"
           for s in names.STATES},
        names.QUEUE_OLDEST_AVAILABLE_AGE.prometheus_name: "through its recorded max",
        names.QUEUE_SCHEDULED_DUE.prometheus_name: "kiln exporter's: through "
                                                   "queue:kiln_jobs_waiting:max, alerts only",
        names.QUEUE_SERVERS.prometheus_name: "kiln exporter's: KilnNoServerAlive only",
        names.TABLE_FREE_BYTES.prometheus_name: "MariaDB and SQLite only: absent on "
                                                "PostgreSQL, where the live board check runs",
    }
    used = {n for q in QUERIES for n in promql.metric_names(q.expr)}
    for metric in names.METRICS:
        samples = set(metric.prometheus_samples)
        assert samples & used or metric.prometheus_name in left_out, metric.prometheus_name


def test_runbooks_name_real_panels() -> None:
    text = promql.RUNBOOKS.read_text(encoding="utf-8")
    mentioned = {" ".join(m.split()) for m in re.findall(r"\*\*([^*]+)\*\*", text)}
    titles = {q.panel for q in QUERIES}
    assert mentioned - NOT_PANELS <= titles, sorted(mentioned - NOT_PANELS - titles)
