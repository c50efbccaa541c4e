"""The mixin's ``_config``: everything an operator tunes, in one frozen record.

Owns the selectors, the deployment labels, the alert thresholds (with per-queue
overrides) and the runbook base URL, and the small PromQL helpers every generated rule
and panel is built with, so that one deployment label set runs through all of them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

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
    # KilnQueueStalled: a queue whose workers run attempts younger than this is busy, not
    # stalled (a transcoding queue of 30-minute jobs); the default job timeout is 30m
    "max_run_seconds": 3600.0,
    # SLO alerts: the fewest jobs (or claims) that must end in the long window before a
    # burn rate counts; one failure of a rare kind is not a page
    "slo_min_events": 10.0,
    # KilnRateLimitBelowRate: a rate key more than this many seconds of its rate behind
    # (kiln_rate_limit_lag_seconds) that starts less than this share of its rate, for 15m
    "rate_limit_lag_seconds": 60.0,
    "rate_limit_drain_ratio": 0.8,
})
QUEUE_THRESHOLDS = frozenset({"failure_ratio", "oldest_available_seconds",
                              "claim_latency_p99_seconds", "admission_delay_p99_seconds",
                              "max_run_seconds"})
# The label kiln_build_info carries the installation id in (kilnotel: migration 12), and
# the recorded series that joins it onto every other kiln series of a scrape target.
INSTALLATION_LABEL = "kiln_installation"
INSTALLATION_INFO = "instance:kiln_installation:info"
# the available jobs per queue, without the recording rule's state label
AVAILABLE = 'max without (state) (queue_state:kiln_jobs:max{state="available"})'
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

    - ``selector``: matchers added to every raw kiln series and to ``up`` (none by
      default: a kiln target is one that exports ``kiln_build_info``, whatever its job
      is called);
    - ``deployment_labels``: the labels that tell one kiln deployment (one database)
      from another on a shared Prometheus; every aggregation keeps them, every alert
      carries them, Alertmanager inhibitions match on them, and each is a dashboard
      variable. By default the installation id (``kiln_installation``) that kilnotel
      exports on ``kiln_build_info`` and the rules join onto every kiln series of a
      target: several services on one kiln database are one deployment, whatever their
      scrape jobs; labels of the targets themselves (``namespace``, ``job``) work too;
    - ``target_labels``: the labels that tell one scrape target from another (the join
      of the installation id is made on them);
    - ``thresholds``: overrides of THRESHOLDS; ``queue_thresholds``: per queue, overrides
      of the keys in QUEUE_THRESHOLDS;
    - ``runbook_url_base``: where docs/runbooks.md is served; each alert links
      ``{base}#{alertname in lower case}``; ``runbook_url_pattern``, when set, is the
      link instead, with ``{alert}`` (``KilnQueueStalled``) and ``{anchor}``
      (``kilnqueuestalled``) filled in (``https://wiki.example.com/kiln/{alert}``);
      without one, ``kiln_dashboard_url`` (where ``kiln dashboard`` is served) makes each
      alert link the dashboard's ``/runbooks`` page, which every installation has;
    - ``alert_extra_labels`` / ``alert_extra_annotations``: added to every alert, for
      routing (``team: payments``) and context (templates allowed in annotations);
    - ``dashboard_url_pattern``: when set, every alert carries a ``dashboard_url``
      annotation, the pattern with ``{uid}`` filled in
      (``https://grafana.example.com/d/{uid}``); ``dashboard_links``: links shown on the
      boards, ``{"title": ..., "url": ...}`` each; ``dashboard_uid``, ``dashboard_tags``,
      ``dashboard_timezone``, ``dashboard_refresh``: the board's own settings;
    - ``failure_objective``: the share of the jobs of a kind that must not fail for good
      over the SLO period (30 days), 0.99 by default (a failure budget of 1%);
      ``kind_failure_objectives``: per kind (``kiln.job.kind``), its own objective;
    - ``latency_slo``: the queue-latency objective (99% of claims within 30 s by
      default); ``queue_latency_slos``: per queue, its own LatencySLO.
    """

    selector: str = ""
    deployment_labels: tuple[str, ...] = (INSTALLATION_LABEL,)
    target_labels: tuple[str, ...] = ("job", "instance")
    thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    queue_thresholds: Mapping[str, Mapping[str, float]] = dataclasses.field(
        default_factory=dict)
    runbook_url_base: str = "docs/runbooks.md"
    runbook_url_pattern: str = ""
    kiln_dashboard_url: str = ""
    alert_extra_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    alert_extra_annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dashboard_url_pattern: str = ""
    dashboard_links: tuple[Mapping[str, str], ...] = ()
    dashboard_uid: str = "kiln-overview"
    dashboard_tags: tuple[str, ...] = ("kiln", "jobs")
    dashboard_timezone: str = "browser"
    dashboard_refresh: str = "30s"
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
        for label in (*self.deployment_labels, *self.target_labels):
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", label) or label == "queue":
                raise ValueError(f"deployment_labels: {label!r} is not a usable label name")
        if not self.target_labels:
            raise ValueError("target_labels: at least one label (instance, say)")
        self._check_routing()

    def _check_routing(self) -> None:
        for label, value in self.alert_extra_labels.items():
            if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", str(label)):
                raise ValueError(f"alert_extra_labels: {label!r} is not a label name")
            if label in ("severity", "alertname", *self.deployment_labels):
                raise ValueError(f"alert_extra_labels: {label!r} is set by the rules")
            if not isinstance(value, str):
                raise ValueError(f"alert_extra_labels[{label!r}]: {value!r} is not a string")
        for name, value in self.alert_extra_annotations.items():
            if name in ("summary", "description", "runbook_url", "dashboard_url"):
                raise ValueError(f"alert_extra_annotations: {name!r} is set by the rules")
            if not isinstance(value, str):
                raise ValueError(f"alert_extra_annotations[{name!r}]: {value!r} is not a "
                                 f"string")
        _check_pattern("runbook_url_pattern", self.runbook_url_pattern, ("alert", "anchor"))
        if self.kiln_dashboard_url and not re.match(r"https?://", self.kiln_dashboard_url):
            raise ValueError(f"kiln_dashboard_url: {self.kiln_dashboard_url!r} is not an "
                             f"http(s) URL")
        _check_pattern("dashboard_url_pattern", self.dashboard_url_pattern, ("uid",))
        for link in self.dashboard_links:
            if not isinstance(link, Mapping) or set(link) != {"title", "url"}:
                raise ValueError(f"dashboard_links: {link!r} is not "
                                 f"{{'title': ..., 'url': ...}}")
        if not re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", self.dashboard_uid):
            raise ValueError(f"dashboard_uid: {self.dashboard_uid!r} is not a Grafana uid "
                             f"(letters, digits, - and _, at most 40)")

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

    @property
    def joins(self) -> bool:
        """Whether raw series need the installation joined on (it is a deployment label)."""
        return INSTALLATION_LABEL in self.deployment_labels

    def joined(self, expr: str) -> str:
        """``expr`` (series of scrape targets, any labels) with ``kiln_installation``
        joined on from the target's ``kiln_build_info``; a target without it drops out."""
        if not self.joins:
            return expr
        on = f"on ({', '.join(self.target_labels)}) group_left ({INSTALLATION_LABEL})"
        if _ATOMIC.fullmatch(expr):
            return f"{expr} * {on} {INSTALLATION_INFO}"
        return f"(\n{expr}\n)\n* {on}\n{INSTALLATION_INFO}"

    def v(self, name: str, matchers: str = "") -> str:
        """A raw series with the selector and ``matchers``, joined to its installation."""
        return self.joined(self.m(name, matchers))

    def over(self, fn: str, name: str, window: str, matchers: str = "") -> str:
        """``fn(name{...}[window])`` of a raw series, joined to its installation."""
        return self.joined(f"{fn}({self.m(name, matchers)}[{window}])")

    def known_targets(self, expr: str, lookback: str = "1h") -> str:
        """``expr`` (series of scrape targets, such as ``up``) for the targets that
        exported ``kiln_build_info`` within ``lookback`` (so a postgres_exporter whose job
        is called kiln-postgres is not one), with the installation joined on."""
        targets = ", ".join(self.target_labels)
        if not self.joins:
            return (f"(\n{expr}\n)\nand on ({targets})\n"
                    f"last_over_time({self.m('kiln_build_info')}[{lookback}])")
        return (f"(\n{expr}\n)\n* on ({targets}) group_left ({INSTALLATION_LABEL})\n"
                f"topk by ({targets}) (1, last_over_time({INSTALLATION_INFO}[{lookback}]))")

    def threshold(self, key: str) -> float:
        return float(self.thresholds.get(key, THRESHOLDS[key]))

    def queue_overrides(self, key: str) -> dict[str, float]:
        return {q: float(v[key]) for q, v in sorted(self.queue_thresholds.items()) if key in v}

    def above(self, expr: str, key: str, op: str = ">") -> str:
        """``expr > threshold`` (or another comparison ``op``), with each overridden
        queue held to its own threshold.

        ``expr`` is a series with a ``queue`` label, written as ``name{matchers}`` or a
        bare name (a recorded series)."""
        overrides = self.queue_overrides(key)
        default = _num(self.threshold(key))
        if not overrides:
            return f"{expr} {op} {default}"
        others = "|".join(re.escape(q) for q in overrides)
        parts = [f"{_with(expr, 'queue!~' + _quote(others))} {op} {default}"]
        parts += [f"{_with(expr, 'queue=' + _quote(q))} {op} {_num(v)}"
                  for q, v in overrides.items()]
        return "\n" + "\nor\n".join(f"({p})" for p in parts) + "\n"

    def runbook(self, alert: str) -> str:
        if self.runbook_url_pattern:
            return self.runbook_url_pattern.format(alert=alert, anchor=alert.lower())
        if self.kiln_dashboard_url:
            return f"{self.kiln_dashboard_url.rstrip('/')}/runbooks#{alert.lower()}"
        return f"{self.runbook_url_base}#{alert.lower()}"

    @property
    def dashboard_url(self) -> str | None:
        """The overview board's URL for the alerts' ``dashboard_url``, or None."""
        if not self.dashboard_url_pattern:
            return None
        return self.dashboard_url_pattern.format(uid=self.dashboard_uid)

    @property
    def where(self) -> str:
        """The deployment, as alert templates print it: ``installation {{ $labels.
        kiln_installation }}`` by default, else ``deployment`` and each label as
        ``name=value`` (``deployment namespace=prod job=prod/kiln-worker``: values joined
        by ``/`` read "prod/prod/kiln-worker" with a PodMonitor's job names, L-5)."""
        if self.deployment_labels == (INSTALLATION_LABEL,):
            return f"installation {{{{ $labels.{INSTALLATION_LABEL} }}}}"
        return "deployment " + " ".join(f"{label}={{{{ $labels.{label} }}}}"
                                        for label in self.deployment_labels)


# a selector, or one function call of one: what binds tighter than * without parentheses
_ATOMIC = re.compile(r"(?:[a-z_]+\()?[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^{}]*\})?(?:\[\w+\])?\)?")


def _num(value: float) -> str:
    return f"{value:g}"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _with(expr: str, matcher: str) -> str:
    if expr.endswith("}"):
        return f"{expr[:-1]}, {matcher}}}"
    return f"{expr}{{{matcher}}}"


def _check_pattern(what: str, pattern: str, fields: tuple[str, ...]) -> None:
    if not pattern:
        return
    try:
        pattern.format(**{f: "x" for f in fields})
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(f"{what}: {pattern!r} may use only "
                         f"{', '.join('{' + f + '}' for f in fields)} ({exc!r})") from None


def from_mapping(data: Mapping[str, Any]) -> Config:
    """A Config from plain data (a YAML or JSON config file's): the fields by name, lists
    for the tuples, ``{seconds, objective}`` mappings for the latency SLOs."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a mixin config is a mapping of Config fields, not {data!r}")
    fields = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"unknown mixin config keys {unknown}: use {sorted(fields)}")
    values = dict(data)
    for key in ("deployment_labels", "target_labels", "dashboard_tags", "dashboard_links"):
        if key in values:
            if not isinstance(values[key], list | tuple):
                raise ValueError(f"{key}: a list, not {values[key]!r}")
            values[key] = tuple(values[key])
    if "latency_slo" in values:
        values["latency_slo"] = _slo("latency_slo", values["latency_slo"])
    if "queue_latency_slos" in values:
        values["queue_latency_slos"] = {
            q: _slo(f"queue_latency_slos[{q!r}]", v)
            for q, v in dict(values["queue_latency_slos"]).items()}
    return Config(**values)


def _slo(what: str, value: Any) -> LatencySLO:
    if not isinstance(value, Mapping) or not set(value) <= {"seconds", "objective"}:
        raise ValueError(f"{what}: {{seconds: ..., objective: ...}}, not {value!r}")
    return LatencySLO(**value)


def load(path: str | Path) -> Config:
    """The Config a YAML (or JSON) file describes; see from_mapping."""
    import yaml

    text = Path(path).read_text(encoding="utf-8")
    return from_mapping(yaml.safe_load(text) or {})


DEFAULT = Config()
