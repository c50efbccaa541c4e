"""The mixin's ``_config``: everything an operator tunes, in one frozen record.

Owns the selectors, the deployment labels, the alert thresholds (with per-queue
overrides) and the runbook base URL, and the small PromQL helpers every generated rule
and panel is built with, so that one deployment label set runs through all of them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from types import MappingProxyType

from kilnotel import _names as names

# Alert thresholds, by key: the defaults of the shipped rules.
THRESHOLDS: Mapping[str, float] = MappingProxyType({
    "failure_ratio": 0.25,  # share of attempts that fail, 5m window, for 15m
    "oldest_available_seconds": 600.0,
    "claim_latency_p99_seconds": 30.0,
    "admission_delay_p99_seconds": 300.0,
    "results_pending": 1000.0,
    "db_errors_per_second": 0.02,
    "counts_age_seconds": 60.0,
    "leader_changes_15m": 5.0,
    "queue_paused_seconds": 3600.0,  # KilnQueuePausedTooLong's for: (one value, not per queue)
    "jobs_table_growth_6h": 0.5,  # KilnJobsTableGrowing: growth over 6h, as a share
    "jobs_table_min_bytes": 268435456.0,  # ... and only past 256 MiB
    "dead_rows_ratio": 0.5,  # KilnJobsTableDeadRows: dead over live rows, for 1h
    "dead_rows_min": 100000.0,  # ... and only past this many dead rows
})
QUEUE_THRESHOLDS = frozenset({"failure_ratio", "oldest_available_seconds",
                              "claim_latency_p99_seconds", "admission_delay_p99_seconds"})
# The claim-latency SLO counts a claim as good when it lands in a histogram bucket at
# or under its threshold, so a threshold must be one of the buckets' bounds.
LATENCY_SLO_BOUNDS = frozenset(names.WAIT_BUCKETS)


def _check_objective(what: str, value: float) -> None:
    if not isinstance(value, int | float) or not 0 < value < 1:
        raise ValueError(f"{what}: {value!r} is not a share between 0 and 1 (0.99 is 99%)")


@dataclasses.dataclass(frozen=True)
class LatencySLO:
    """A queue-latency objective: ``objective`` of the jobs claimed from a queue are
    claimed within ``seconds`` of becoming ready, over the SLO period (30 days)."""

    seconds: float = 30.0
    objective: float = 0.99

    def __post_init__(self) -> None:
        if float(self.seconds) not in LATENCY_SLO_BOUNDS:
            raise ValueError(f"latency SLO seconds={self.seconds:g} is not a claim-latency "
                             f"bucket bound; use one of {sorted(LATENCY_SLO_BOUNDS)}")
        _check_objective("latency SLO objective", self.objective)


@dataclasses.dataclass(frozen=True)
class Config:
    """What the generated rules and boards are built from.

    - ``selector``: matchers added to every raw kiln series and to ``up`` (which tells a
      kiln target from the others);
    - ``deployment_labels``: the labels that tell one kiln deployment (one database)
      from another on a shared Prometheus; every aggregation keeps them, every alert
      carries them, Alertmanager inhibitions match on them, and each is a dashboard
      variable;
    - ``thresholds``: overrides of THRESHOLDS; ``queue_thresholds``: per queue, overrides
      of the keys in QUEUE_THRESHOLDS;
    - ``runbook_url_base``: where docs/runbooks.md is served; each alert links
      ``{base}#{alertname in lower case}``;
    - ``failure_objective``: the share of the jobs of a kind that must not fail for good
      over the SLO period (30 days), 0.99 by default (a failure budget of 1%);
      ``kind_failure_objectives``: per kind (``kiln.job.kind``), its own objective;
    - ``latency_slo``: the queue-latency objective (99% of claims within 30 s by
      default); ``queue_latency_slos``: per queue, its own LatencySLO.
    """

    selector: str = 'job=~".*kiln.*"'
    deployment_labels: tuple[str, ...] = ("namespace", "job")
    thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    queue_thresholds: Mapping[str, Mapping[str, float]] = dataclasses.field(
        default_factory=dict)
    runbook_url_base: str = "docs/runbooks.md"
    failure_objective: float = 0.99
    kind_failure_objectives: Mapping[str, float] = dataclasses.field(default_factory=dict)
    latency_slo: LatencySLO = LatencySLO()
    queue_latency_slos: Mapping[str, LatencySLO] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_objective("failure_objective", self.failure_objective)
        for kind, objective in self.kind_failure_objectives.items():
            _check_objective(f"kind_failure_objectives[{kind!r}]", objective)
        for queue, slo in self.queue_latency_slos.items():
            if not isinstance(slo, LatencySLO):
                raise ValueError(f"queue_latency_slos[{queue!r}]: a LatencySLO(seconds, "
                                 f"objective), not {slo!r}")
        unknown = set(self.thresholds) - set(THRESHOLDS)
        if unknown:
            raise ValueError(f"unknown thresholds {sorted(unknown)}: use {sorted(THRESHOLDS)}")
        for queue, overrides in self.queue_thresholds.items():
            bad = set(overrides) - QUEUE_THRESHOLDS
            if bad:
                raise ValueError(f"queue_thresholds[{queue!r}]: {sorted(bad)} cannot be set "
                                 f"per queue; use {sorted(QUEUE_THRESHOLDS)}")
        if not self.deployment_labels:
            raise ValueError("deployment_labels: at least one label (job, say)")
        for label in self.deployment_labels:
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label) or label == "queue":
                raise ValueError(f"deployment_labels: {label!r} is not a usable label name")

    # --------------------------------------------------------------- PromQL helpers
    @property
    def by(self) -> str:
        """The deployment labels, comma separated, for ``by (...)`` and ``on (...)``."""
        return ", ".join(self.deployment_labels)

    def by_and(self, *labels: str) -> str:
        return ", ".join((*self.deployment_labels, *labels))

    def m(self, name: str, matchers: str = "") -> str:
        """``name`` with the selector and ``matchers``."""
        inner = ", ".join(part for part in (self.selector, matchers) if part)
        return f"{name}{{{inner}}}" if inner else name

    def threshold(self, key: str) -> float:
        return float(self.thresholds.get(key, THRESHOLDS[key]))

    def queue_overrides(self, key: str) -> dict[str, float]:
        return {q: float(v[key]) for q, v in sorted(self.queue_thresholds.items()) if key in v}

    def above(self, expr: str, key: str) -> str:
        """``expr > threshold``, with each overridden queue held to its own threshold.

        ``expr`` is a series with a ``queue`` label, written as ``name{matchers}`` or a
        bare name (a recorded series)."""
        overrides = self.queue_overrides(key)
        default = _num(self.threshold(key))
        if not overrides:
            return f"{expr} > {default}"
        others = "|".join(re.escape(q) for q in overrides)
        parts = [f"{_with(expr, 'queue!~' + _quote(others))} > {default}"]
        parts += [f"{_with(expr, 'queue=' + _quote(q))} > {_num(v)}"
                  for q, v in overrides.items()]
        return "\n" + "\nor\n".join(f"({p})" for p in parts) + "\n"

    def runbook(self, alert: str) -> str:
        return f"{self.runbook_url_base}#{alert.lower()}"

    @property
    def where(self) -> str:
        """The deployment, as alert templates print it: ``{{ $labels.namespace }}/...``."""
        return "/".join(f"{{{{ $labels.{label} }}}}" for label in self.deployment_labels)


def _num(value: float) -> str:
    return f"{value:g}"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _with(expr: str, matcher: str) -> str:
    if expr.endswith("}"):
        return f"{expr[:-1]}, {matcher}}}"
    return f"{expr}{{{matcher}}}"


DEFAULT = Config()
