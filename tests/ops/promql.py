"""PromQL as the ops tests read it: the shipped rules and dashboard, parsed and checked.

Owns loading alerts/*.yml and dashboards/*.json, substituting Grafana's variables, and
the static checks every expression must pass (names from kilnotel, counters only under
rate/increase, database-wide gauges under max). Parsing uses ``promql-parser`` (the
Rust parser's Python bindings), so an expression Prometheus would reject fails here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import promql_parser as pp
import yaml

from kilnotel import _names as names

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
RULE_FILES = (ALERTS / "kiln.recording.yml", ALERTS / "kiln.rules.yml")
DEPLOYMENT_LABELS = ("kiln_installation",)  # mixin.config.DEFAULT's
# one scrape target: a matching or an aggregation on all of these stays within one target
# (the join of kiln_build_info's installation onto a target's series), so within one
# deployment
TARGET_LABELS = ("job", "instance")
# The one selector without a metric name: any kiln series folded into the SDK's overflow.
OVERFLOW_MATCHER = ("otel_metric_overflow", "true")
ALERT_TESTS = sorted((ALERTS / "tests").glob("*.yml"))
DASHBOARDS = sorted((ROOT / "dashboards").glob("*.json"))
RUNBOOKS = ROOT / "docs" / "runbooks.md"

COUNTER_SUFFIXES = ("_total", "_bucket", "_count", "_sum")
RANGE_FUNCTIONS = {"rate", "irate", "increase"}
# Gauges that count the whole database: every worker reports the same value.
DATABASE_GAUGES = frozenset(
    [m.prometheus_name for m in names.JOBS_BY_STATE.values()]
    + [names.QUEUE_OLDEST_AVAILABLE_AGE.prometheus_name]
    + [m.prometheus_name for m in (names.TABLE_ROWS_ESTIMATE, names.TABLE_DEAD_ROWS,
                                   names.TABLE_BYTES, names.TABLE_FREE_BYTES)]
)
# What Grafana substitutes before a query reaches Prometheus, for checks and live runs.
GRAFANA_VARIABLES = {
    "${datasource}": "prometheus",
    "$__rate_interval": "15s",
    "$__interval": "5s",
    "$queue": ".*",
    "$kind": ".*",
    "$namespace": ".*",
    "$job": ".*",
    "$kiln_installation": ".*",
    "$instance": ".*",
}


def substitute(expr: str, *, keep_template_variables: bool = False) -> str:
    """``expr`` as Grafana sends it; optionally leaving $queue/$kind in the matchers."""
    for variable, value in GRAFANA_VARIABLES.items():
        if not (keep_template_variables and not variable.startswith("$__")):
            expr = expr.replace(variable, value)
    return expr


# ---------------------------------------------------------------------------- loading
def rule_groups(path: Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    groups: list[dict[str, Any]] = data["groups"]
    return groups


def rules() -> Iterator[dict[str, Any]]:
    for path in RULE_FILES:
        for group in rule_groups(path):
            yield from group["rules"]


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def recorded_names() -> frozenset[str]:
    return frozenset(r["record"] for r in rules() if "record" in r)


def load_builder() -> ModuleType:
    """dashboards/build.py, imported from its path (dashboards/ is not a package)."""
    spec = importlib.util.spec_from_file_location("kiln_dashboards_build",
                                                  ROOT / "dashboards" / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboard(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


@dataclasses.dataclass(frozen=True)
class PanelQuery:
    board: str
    panel: str
    ref: str
    expr: str  # as written, with Grafana variables

    @property
    def label(self) -> str:
        return f"{self.board}: {self.panel} [{self.ref}]"


def panel_queries() -> list[PanelQuery]:
    out = []
    for path in DASHBOARDS:
        for panel in panels(dashboard(path)):
            for target in panel.get("targets", []):
                out.append(PanelQuery(path.name, panel["title"], target["refId"],
                                      target["expr"]))
    return out


def variable_queries(board: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, metric selector, label) of every ``label_values(selector, label)`` variable."""
    out = []
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
        assert match, f"variable {var['name']}: unsupported query {var['definition']!r}"
        out.append((var["name"], match.group(1), match.group(2)))
    return out


# --------------------------------------------------------------------------- checking
def children(node: Any) -> list[Any]:
    if isinstance(node, pp.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, pp.AggregateExpr):
        return [node.expr] + ([node.param] if node.param is not None else [])
    if isinstance(node, pp.Call):
        return list(node.args)
    if isinstance(node, pp.ParenExpr | pp.UnaryExpr | pp.SubqueryExpr):
        return [node.expr]
    if isinstance(node, pp.MatrixSelector):
        return [node.vector_selector]
    return []


def walk(node: Any, parents: tuple[Any, ...] = ()) -> Iterator[tuple[Any, tuple[Any, ...]]]:
    """Every node with the chain of its ancestors (nearest last)."""
    yield node, parents
    for child in children(node):
        yield from walk(child, (*parents, node))


def selectors(expr: str, *, keep_template_variables: bool = False) -> list[pp.VectorSelector]:
    tree = pp.parse(substitute(expr, keep_template_variables=keep_template_variables))
    return [node for node, _ in walk(tree) if isinstance(node, pp.VectorSelector)]


def _is_overflow(selector: pp.VectorSelector) -> bool:
    found = {(m.name, m.value) for m in selector.matchers.matchers}
    return OVERFLOW_MATCHER in found and ("__name__", "kiln_.+") in found


def metric_names(expr: str) -> set[str]:
    return {s.name if s.name else "{otel_metric_overflow}" for s in selectors(expr)
            if s.name or _is_overflow(s)}


def _drops_deployment(node: Any) -> str | None:
    deployment = set(DEPLOYMENT_LABELS)
    target = set(TARGET_LABELS)
    if isinstance(node, pp.AggregateExpr):
        modifier = node.modifier
        labels = set(modifier.labels) if modifier is not None else set()
        if modifier is not None and "without" in str(modifier).lower():
            return None if not labels & deployment else f"{node.op} {modifier}"
        if deployment <= labels or target <= labels:
            return None
        return f"{node.op} {modifier or '(no by)'}"
    if isinstance(node, pp.Call) and node.func.name in ("absent", "absent_over_time"):
        return f"{node.func.name}()"
    if isinstance(node, pp.BinaryExpr) and node.modifier is not None:
        matching = node.modifier.matching
        if matching is not None and str(matching).lower().startswith("on") and not (
                deployment <= set(matching.labels) or target <= set(matching.labels)):
            return str(matching)
    return None


def unscoped_aggregations(expr: str) -> list[str]:
    """Aggregations and ``on (...)`` matchings of ``expr`` that drop a deployment label,
    and any ``absent()``: each would merge, or miss, deployments."""
    found = (_drops_deployment(node) for node, _ in walk(pp.parse(substitute(expr))))
    return [f"{what} drops a deployment label" for what in found if what]


def known_names() -> frozenset[str]:
    """kilnotel's names, recorded series, and ``up`` (Prometheus's own, per target)."""
    return names.prometheus_names() | recorded_names() | {"up"}


def _enclosing_call(parents: tuple[Any, ...]) -> str | None:
    for node in reversed(parents):
        if isinstance(node, pp.Call):
            return str(node.func.name)
    return None


def _enclosing_aggregation(parents: tuple[Any, ...]) -> str | None:
    for node in reversed(parents):
        if isinstance(node, pp.AggregateExpr):
            return str(node.op)
    return None


def problems(expr: str) -> list[str]:
    """What is wrong with ``expr`` against kiln's conventions; empty when nothing is."""
    found: list[str] = []
    tree = pp.parse(substitute(expr))
    known = known_names()
    for node, parents in walk(tree):
        if isinstance(node, pp.Call) and node.func.name in RANGE_FUNCTIONS:
            for arg in node.args:
                if isinstance(arg, pp.MatrixSelector):
                    name = arg.vector_selector.name or ""
                    if not name.endswith(COUNTER_SUFFIXES):
                        found.append(f"{node.func.name}() over {name}, which is not a counter")
        if not isinstance(node, pp.VectorSelector):
            continue
        name = node.name or ""
        if not name and _is_overflow(node):
            continue
        if name not in known:
            found.append(f"{name!r} is neither a kilnotel metric nor a recorded series")
        if name.endswith("_total") and _enclosing_call(parents) not in RANGE_FUNCTIONS:
            found.append(f"{name} outside rate()/increase()")
        if name in DATABASE_GAUGES and _enclosing_aggregation(parents) != "max":
            found.append(f"{name} counts the whole database: aggregate it with max")
    return found


def runbook_anchors() -> set[str]:
    """GitHub-style anchors of the level-2 headings of docs/runbooks.md."""
    text = RUNBOOKS.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in headings}
