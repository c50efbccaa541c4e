"""The Grafana dashboards of the mixin: ``dashboards/kiln-overview.json``.

Owns the panels, their PromQL and their layout (classic dashboard model, schemaVersion
41), provisionable from files as it is: every panel uses the ``${datasource}``
variable, so no ``__inputs`` are needed. Panels are written as for one deployment;
``mixin.scope`` then adds the selector and a ``$<label>`` variable matcher for each
deployment label of the config to every series, and the deployment labels to every
``by``. ``python -m mixin`` writes the JSON; ``--check`` tells when it is stale.

Metric names come from kilnotel/_names.py after the Prometheus translation, or are
recorded series of alerts/kiln.recording.yml; tests/ops/test_dashboards.py checks both.
Plain dictionaries rather than grafana-foundation-sdk: the model is small, and the SDK
assigns no panel ids and pins a Grafana version of its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kilnotel.mixin import slo
from kilnotel.mixin.config import INSTALLATION_INFO, Config
from kilnotel.mixin.scope import matchers, scoped

OVERVIEW = "kiln-overview.json"
SCHEMA_VERSION = 41
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "$__rate_interval"
Q = 'queue=~"$queue"'
QK = 'queue=~"$queue", kiln_job_kind=~"$kind"'

Panel = dict[str, Any]
Target = dict[str, Any]


# ------------------------------------------------------------------------ targets
def target(expr: str, legend: str = "__auto", *, fmt: str = "time_series",
           exemplar: bool = False) -> Target:
    """One query; ``exemplar`` asks Prometheus for the exemplars kilnotel exposes on its
    claim latency and job duration buckets (links to the traces)."""
    out = {"expr": expr, "legendFormat": legend, "format": fmt, "range": True,
           "instant": False, "datasource": DATASOURCE}
    if exemplar:
        out["exemplar"] = True
    return out


def quantile(q: float, metric: str, by: str, selector: str) -> str:
    """histogram_quantile over a kilnotel histogram, summed over workers."""
    return (f"histogram_quantile({q}, sum by ({by}) "
            f"(rate({metric}_bucket{{{selector}}}[{RATE}])))")


# ------------------------------------------------------------------------- panels
def _legend() -> dict[str, Any]:
    return {"showLegend": True, "displayMode": "list", "placement": "bottom", "calcs": []}


def _tooltip() -> dict[str, Any]:
    return {"mode": "multi", "sort": "desc"}


def timeseries(title: str, description: str, unit: str, targets: list[Target],
               *, stack: bool = False, min_zero: bool = True) -> Panel:
    custom: dict[str, Any] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10,
                              "showPoints": "never", "spanNulls": False}
    if stack:
        custom["stacking"] = {"mode": "normal", "group": "A"}
    defaults: dict[str, Any] = {"unit": unit, "custom": custom}
    if min_zero:
        defaults["min"] = 0
    return {"type": "timeseries", "title": title, "description": description,
            "targets": targets, "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {"legend": _legend(), "tooltip": _tooltip()}}


def stat(title: str, description: str, unit: str, targets: list[Target],
         *, red_above: float | None = None) -> Panel:
    steps: list[dict[str, Any]] = [{"color": "green", "value": None}]
    if red_above is not None:
        steps.append({"color": "red", "value": red_above})
    return {"type": "stat", "title": title, "description": description, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit, "thresholds": {
                "mode": "absolute", "steps": steps}}, "overrides": []},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "",
                                          "values": False},
                        "colorMode": "value", "graphMode": "area", "textMode": "auto",
                        "justifyMode": "auto", "orientation": "auto"}}


def state_timeline(title: str, description: str, targets: list[Target],
                   off: tuple[str, str], on: tuple[str, str]) -> Panel:
    """A 0/1 gauge per instance; ``off``/``on`` are (text, color) of 0 and 1."""
    mappings = [{"type": "value", "options": {
        "0": {"text": off[0], "color": off[1], "index": 0},
        "1": {"text": on[0], "color": on[1], "index": 1}}}]
    return {"type": "state-timeline", "title": title, "description": description,
            "targets": targets,
            "fieldConfig": {"defaults": {"unit": "bool", "mappings": mappings,
                                         "color": {"mode": "thresholds"},
                                         "thresholds": {"mode": "absolute", "steps": [
                                             {"color": "text", "value": None}]}},
                            "overrides": []},
            "options": {"mergeValues": True, "showValue": "never", "alignValue": "left",
                        "rowHeight": 0.9, "legend": _legend(),
                        "tooltip": {"mode": "single", "sort": "none"}}}


def heatmap(title: str, description: str, y_unit: str, targets: list[Target]) -> Panel:
    """Pre-bucketed histogram (format heatmap): cells are observations per second."""
    return {"type": "heatmap", "title": title, "description": description, "targets": targets,
            "fieldConfig": {"defaults": {"unit": "ops"}, "overrides": []},
            "options": {"calculate": False, "cellGap": 1,
                        "yAxis": {"axisPlacement": "left", "unit": y_unit},
                        "rowsFrame": {"layout": "auto"},
                        "color": {"mode": "scheme", "scheme": "Oranges", "fill": "dark-orange",
                                  "exponent": 0.5, "steps": 64, "reverse": False},
                        "filterValues": {"le": 1e-9},
                        "tooltip": {"mode": "single", "yHistogram": False},
                        "legend": {"show": True},
                        "exemplars": {"color": "rgba(255,0,255,0.7)"}}}


def row(title: str) -> Panel:
    return {"type": "row", "title": title, "collapsed": False, "panels": []}


# ----------------------------------------------------------------------- sections
def jobs_section() -> list[tuple[Panel, int, int]]:
    finished = "kiln_jobs_finished_total"
    return [
        (row("Jobs"), 24, 1),
        (timeseries(
            "Throughput by outcome",
            "Attempts that ended per second, by outcome, over every worker: completed, "
            "retry (failed, scheduled again), failed (failed for good), snoozed, "
            "cancelled, handed_back (shutdown).",
            "ops",
            [target(f'sum by (outcome) (rate({finished}{{{QK}}}[{RATE}]))', "{{outcome}}")],
            stack=True), 12, 8),
        (timeseries(
            "Failure ratio",
            "Share of the attempts that ran to an end (completed, retry, failed) which "
            "failed, by queue. Alert KilnJobFailureRatioHigh fires above 25% for 15m.",
            "percentunit",
            [target(f'sum by (queue) (rate({finished}{{outcome=~"retry|failed", {QK}}}[{RATE}]))'
                    f' / sum by (queue) (rate({finished}'
                    f'{{outcome=~"completed|retry|failed", {QK}}}[{RATE}]))', "{{queue}}")]),
            6, 8),
        (stat(
            "Failed jobs",
            "Jobs in state failed, by queue (kiln_jobs_failed, max over workers): out of "
            "attempts or failed permanently, waiting for someone to requeue or delete "
            "them. Alert KilnFailedJobsPresent (info).",
            "short",
            [target('queue_state:kiln_jobs:max{state="failed", ' + Q + '}', "{{queue}}")],
            red_above=1), 6, 8),
        (timeseries(
            "Failures for good by kind",
            "Attempts that failed for good per second, by queue and kind (outcome failed). "
            "Alert KilnJobsFailed fires on any new one.",
            "ops",
            [target(f'sum by (queue, kiln_job_kind) (rate({finished}'
                    f'{{outcome="failed", {QK}}}[{RATE}]))', "{{queue}} {{kiln_job_kind}}")]),
            12, 8),
        (timeseries(
            "Retries",
            "Attempts that failed and were scheduled again after their backoff, per "
            "second, by queue and kind.",
            "ops",
            [target(f'sum by (queue, kiln_job_kind) (rate(kiln_jobs_retried_total{{{QK}}}'
                    f'[{RATE}]))', "{{queue}} {{kiln_job_kind}}")]), 12, 8),
    ]


def queues_section() -> list[tuple[Panel, int, int]]:
    return [
        (row("Queues"), 24, 1),
        (timeseries(
            "Backlog",
            "Jobs available (ready, not yet claimed) by queue, max over workers. Alerts "
            "KilnQueueBacklogGrowing and KilnQueueStalled.",
            "short",
            [target('queue_state:kiln_jobs:max{state="available", ' + Q + '}', "{{queue}}")]),
            8, 8),
        (timeseries(
            "Jobs by state",
            "Jobs in every state but completed and cancelled, by queue and state (database "
            "counts cached by each worker, max over workers).",
            "short",
            [target('queue_state:kiln_jobs:max{state!~"completed|cancelled", ' + Q + '}',
                    "{{queue}} {{state}}")]), 8, 8),
        (timeseries(
            "Oldest available job age",
            "How long the oldest available job of each queue has been ready to run, by the "
            "database clock (0 when none). Alert KilnOldestJobTooOld.",
            "s",
            [target('queue:kiln_queue_oldest_available_age_seconds:max{' + Q + '}',
                    "{{queue}}")]), 8, 8),
        (timeseries(
            "Oldest running job",
            "How long the longest-running attempt of each queue has run, max over workers "
            "(0 when none): a job that hangs shows as a line that only climbs.",
            "s",
            [target(f"max by (queue) (kiln_server_oldest_running_age_seconds{{{Q}}})",
                    "{{queue}}")]), 12, 8),
        (timeseries(
            "Enqueued vs claimed",
            "Jobs inserted per second by observed clients (observe_app/observe_client) "
            "against jobs claimed per second by servers, by queue.",
            "ops",
            [target(f'sum by (queue) (rate(kiln_jobs_enqueued_total{{{QK}}}[{RATE}]))',
                    "enqueued {{queue}}"),
             target(f'sum by (queue) (rate(kiln_jobs_claimed_total{{{QK}}}[{RATE}]))',
                    "claimed {{queue}}")]), 12, 8),
        (timeseries(
            "Running vs concurrency",
            "Jobs running and pool slots in force (configured, or set at runtime with "
            "kiln queues concurrency), by queue, summed over workers: a queue whose "
            "running line sits on its concurrency line is saturated.",
            "short",
            [target(f'sum by (queue) (kiln_server_running{{{Q}}})', "running {{queue}}"),
             target(f'sum by (queue) (kiln_server_concurrency{{{Q}}})',
                    "concurrency {{queue}}")]), 12, 8),
        (timeseries(
            "Paused queues",
            "1 while a queue is paused (kiln queues pause, or the dashboard's Queues page): "
            "its servers claim none of its jobs. Alert KilnQueuePausedTooLong.",
            "short",
            [target(f"max by (queue) (kiln_queue_paused{{{Q}}})", "{{queue}}")]), 12, 8),
        (timeseries(
            "Global concurrency in use",
            "Running jobs under a global limit (kiln.Concurrency), by key group: kind:NAME "
            "sums every key of the kind (every tenant), queue:NAME a queue's limit. A kind "
            "with one key per tenant sits at most at max x tenants; a queue's at its max.",
            "short",
            [target("max by (key_group) (kiln_concurrency_in_use)", "{{key_group}}")]), 12, 8),
    ]


def latency_section() -> list[tuple[Panel, int, int]]:
    claim = "kiln_claim_latency_seconds"
    return [
        (row("Latency"), 24, 1),
        (timeseries(
            "Claim latency percentiles",
            "Time from a job becoming ready (run_at, or admission) to being claimed: p50, "
            "p90, p99 over every worker. Alert KilnClaimLatencyHigh (p99 > 30s).",
            "s",
            [target(quantile(q, claim, "le", QK), f"p{round(q * 100)}")
             for q in (0.5, 0.9, 0.99)]), 12, 8),
        (heatmap(
            "Claim latency heatmap",
            "Distribution of claim latency: claims per second in each histogram bucket. "
            "Exemplars (Prometheus with --enable-feature=exemplar-storage) link a cell to "
            "the trace of a job's enqueue.",
            "s",
            [target(f'sum by (le) (rate({claim}_bucket{{{QK}}}[{RATE}]))', "{{le}}",
                    fmt="heatmap", exemplar=True)]), 12, 8),
        (timeseries(
            "Job duration by kind",
            "Run time of one attempt by kind, p50 and p99 over every worker and outcome; "
            "the p99's exemplars link to attempts' process spans.",
            "s",
            [target(quantile(0.5, "kiln_job_duration_seconds", "kiln_job_kind, le", QK),
                    "{{kiln_job_kind}} p50"),
             target(quantile(0.99, "kiln_job_duration_seconds", "kiln_job_kind, le", QK),
                    "{{kiln_job_kind}} p99", exemplar=True)]), 8, 8),
        (timeseries(
            "Admission delay",
            "Time from a rate-limited job's creation to its admission (pending to "
            "available), p50 and p99 by queue. Alerts KilnAdmissionFallingBehind and "
            "KilnAdmissionStalled.",
            "s",
            [target(quantile(0.5, "kiln_admission_delay_seconds", "queue, le", QK),
                    "{{queue}} p50"),
             target(quantile(0.99, "kiln_admission_delay_seconds", "queue, le", QK),
                    "{{queue}} p99")]), 8, 8),
        (timeseries(
            "Claim query duration",
            "Duration of one claim query round trip (whether or not it claimed anything), "
            "p99 by queue: the database's share of claim latency.",
            "s",
            [target(quantile(0.99, "kiln_claim_duration_seconds", "queue, le", Q),
                    "{{queue}} p99")]), 8, 8),
    ]


def rate_limits_section() -> list[tuple[Panel, int, int]]:
    """Per rate key: at most the 50 busiest keys of each worker (the counters) and the
    20 keys with the most due pending jobs (the gauges): docs/rate-limits.md."""
    return [
        (row("Rate limits"), 24, 1),
        (timeseries(
            "Rate keys: started and admitted against their rate",
            "Jobs per second by rate key: attempts started and jobs admitted (summed over "
            "workers; each worker names its 50 busiest keys), and the configured rate "
            "(rate / per) of the 20 keys with the most jobs waiting for admission. A key "
            "with a backlog should start at its rate. Alert KilnRateLimitBelowRate.",
            "none",
            [target(f"sum by (rate_key) (rate(kiln_rate_limit_started_total[{RATE}]))",
                    "{{rate_key}} started"),
             target(f"sum by (rate_key) (rate(kiln_rate_limit_admitted_total[{RATE}]))",
                    "{{rate_key}} admitted"),
             target("max by (rate_key) (kiln_rate_limit_rate)", "{{rate_key}} rate")]),
         12, 8),
        (timeseries(
            "Admission lag by rate key",
            "How far behind its rate each key's backlog is: the seconds its due pending "
            "jobs take to admit at the configured rate (backlog x per / rate), for the 20 "
            "keys with the most. Falls by one second a second while a key drains at its "
            "rate; grows while jobs come faster than the rate.",
            "s",
            [target("max by (rate_key) (kiln_rate_limit_lag_seconds)", "{{rate_key}}")]),
         6, 8),
        (timeseries(
            "Rate key backlog",
            "Due pending jobs waiting for admission by rate key, for the 20 keys with the "
            "most (jobs whose run_at has not come yet are not counted).",
            "short",
            [target("max by (rate_key) (kiln_rate_limit_backlog)", "{{rate_key}}")]), 6, 8),
    ]


def recovery_section() -> list[tuple[Panel, int, int]]:
    return [
        (row("Recovery and errors"), 24, 1),
        (timeseries(
            "Rescues and hand-backs",
            "Jobs of dead servers rescued by the leader (by outcome: retry, or failed when "
            "out of attempts), and jobs handed back at shutdown without using an attempt, "
            "per interval. Alert KilnJobsRescued.",
            "short",
            [target(f'sum by (queue, outcome) (increase(kiln_jobs_rescued_total{{{QK}}}'
                    f'[{RATE}]))', "rescued {{queue}} ({{outcome}})"),
             target(f'sum by (queue) (increase(kiln_jobs_handed_back_total{{{QK}}}[{RATE}]))',
                    "handed back {{queue}}")]), 8, 8),
        (timeseries(
            "Stuck handlers",
            "Handlers still running after kiln gave up on their attempt (a plain def "
            "handler past its timeout, a shutdown or a fence), by worker and queue: each "
            "holds a slot; and attempts given up on per interval. Alerts KilnHandlersStuck "
            "and KilnQueueSlotsStuck.",
            "short",
            [target(f"max by (instance, queue) (kiln_server_handlers_stuck{{{Q}}})",
                    "stuck {{instance}} {{queue}}"),
             target(f"sum by (queue) (increase(kiln_jobs_stuck_total{{{QK}}}[{RATE}]))",
                    "given up {{queue}}")]), 8, 8),
        (timeseries(
            "Database errors",
            "Store operations that raised, per second, by worker and operation. Alert "
            "KilnDatabaseErrors.",
            "ops",
            [target(f'sum by (instance, operation) (rate(kiln_db_errors_total[{RATE}]))',
                    "{{instance}} {{operation}}")]), 8, 8),
        (timeseries(
            "Fences and heartbeat failures",
            "Heartbeats a worker could not confirm, and times it fenced itself off (stopped "
            "claiming and cancelled its jobs), per interval. Alert KilnServerFenced.",
            "short",
            [target(f'sum by (instance) (increase(kiln_server_fenced_total[{RATE}]))',
                    "fenced {{instance}}"),
             target(f'sum by (instance) (increase(kiln_server_heartbeat_failures_total'
                    f'[{RATE}]))', "heartbeat failures {{instance}}")]), 8, 8),
        (timeseries(
            "Cancel latency",
            "Time from cancelling a running job (client, CLI, dashboard) to the end of its "
            "handler on its server, p50 and p99 over every worker. Near heartbeat_interval: "
            "the servers get no notifications; near kill_grace: plain def handlers that do "
            "not look at job.cancelled (docs/operating.md, \"In an incident\").",
            "s",
            [target(quantile(q, "kiln_cancel_latency_seconds", "le", QK), f"p{round(q * 100)}")
             for q in (0.5, 0.99)]), 8, 8),
    ]


def servers_section() -> list[tuple[Panel, int, int]]:
    return [
        (row("Servers"), 24, 1),
        (stat(
            "Servers",
            "Workers scraped, and how many of them report healthy. Alert KilnNoServerAlive.",
            "short",
            [target("kiln:servers:count", "servers"),
             target("kiln:servers_healthy:sum", "healthy")]), 6, 8),
        (state_timeline(
            "Leader",
            "Which worker holds the leader lease (runs rescue, pruning and recurring jobs). "
            "Alerts KilnNoLeader and KilnSeveralLeaders.",
            [target("max by (instance) (kiln_server_leader)", "{{instance}}")],
            off=("follower", "transparent"), on=("leader", "blue")), 9, 8),
        (state_timeline(
            "Health",
            "server.healthy() of each worker: false when fenced, its heartbeat is stale or "
            "its results pile up. Alert KilnServerUnhealthy.",
            [target("min by (instance) (kiln_server_healthy)", "{{instance}}")],
            off=("unhealthy", "red"), on=("healthy", "green")), 9, 8),
        (stat(
            "Targets down",
            "kiln scrape targets Prometheus cannot reach (up == 0): a dead or hung worker "
            "exports nothing, not even an unhealthy 0. Alert KilnWorkerDown.",
            "short",
            [target("kiln:targets_down:count", "down")], red_above=1), 6, 8),
        (state_timeline(
            "Scrape targets",
            "Every kiln target Prometheus scrapes, and whether the last scrape succeeded: a "
            "missing worker shows as down here while its own panels go blank.",
            [target("max by (instance) (up)", "{{instance}}")],
            off=("down", "red"), on=("up", "green")), 18, 8),
        (timeseries(
            "Leader changes",
            "Leadership gained and lost per interval, over every worker. Alert "
            "KilnLeaderFlapping.",
            "short",
            [target(f'sum by (change) (increase(kiln_server_leader_changes_total[{RATE}]))',
                    "{{change}}")]), 6, 8),
        (timeseries(
            "Heartbeat age",
            "Seconds since each worker's last confirmed heartbeat; it fences itself after "
            "3 heartbeat intervals.",
            "s",
            [target("max by (instance) (kiln_server_heartbeat_age_seconds)", "{{instance}}")]),
            6, 8),
        (timeseries(
            "Results pending",
            "Results computed but not yet written to the database, per worker. Alert "
            "KilnResultsPilingUp.",
            "short",
            [target("max by (instance) (kiln_server_results_pending)", "{{instance}}")]),
            6, 8),
        (timeseries(
            "Database connections",
            "Database connections each worker's process holds (pool, LISTEN, the App's "
            "clients): to the pooler when behind one. Plan with docs/scaling.md.",
            "short",
            [target("max by (instance) (kiln_server_connections)", "{{instance}}")]),
            6, 8),
        (timeseries(
            "Telemetry errors",
            "kilnotel's own health, per worker: reads of the database-wide counts that "
            "failed, and exceptions of event subscribers (the metrics and spans they feed "
            "miss those events). Alerts KilnCountsStale and KilnEventSubscriberErrors.",
            "short",
            [target(f"sum by (instance) (increase(kiln_counts_refresh_failures_total[{RATE}]))",
                    "counts refresh {{instance}}"),
             target(f"sum by (instance) (increase(kiln_events_subscriber_errors_total"
                    f"[{RATE}]))", "subscriber errors {{instance}}")]), 6, 8),
        (stat(
            "Versions",
            "Workers by kiln version (kiln_build_info): more than one during a rolling "
            "deploy, and a worker left behind shows here.",
            "short",
            [target("count by (version) (kiln_build_info)", "{{version}}")]), 6, 8),
        (timeseries(
            "Counts age",
            "Seconds since the worker that publishes the database-wide counts (the "
            "leader, by default) last read them. Past counts_max_age (20s by default) "
            "it withdraws them rather than export frozen values. Alert KilnCountsStale.",
            "s",
            [target("max by (instance) (kiln_counts_age_seconds)", "{{instance}}")]),
            6, 8),
        (state_timeline(
            "Notifier",
            "Each worker's notification channel (PostgreSQL LISTEN or a bus): without it "
            "the worker polls. Absent for stores that run without one. Alert "
            "KilnNotifierDown.",
            [target("min by (instance) (kiln_notifier_up)", "{{instance}}")],
            off=("down", "orange"), on=("up", "green")), 6, 8),
    ]


def results_section() -> list[tuple[Panel, int, int]]:
    def per_instance(metric: str, legend: str) -> Target:
        return target(f"sum by (instance) (increase({metric}[{RATE}]))",
                      f"{legend} {{{{instance}}}}")

    return [
        (row("Results path and configuration"), 24, 1),
        (timeseries(
            "Results path problems",
            "Per worker and interval: results the database refused (written as failed "
            "attempts instead), results that could not be written at all (left to "
            "reconciliation), results written that applied nothing (fenced), crashes of "
            "the results writer. Alerts KilnResultsPoisoned, KilnResultsDropped, "
            "KilnResultsWriterCrashed.",
            "short",
            [per_instance("kiln_results_poisoned_total", "poisoned"),
             per_instance("kiln_results_dropped_total", "dropped"),
             per_instance("kiln_results_unapplied_total", "unapplied"),
             per_instance("kiln_server_completer_crashes_total", "writer crashes")]), 9, 8),
        (timeseries(
            "Results failing",
            "Seconds since each worker's result writes began to fail (0 while they "
            "succeed); healthy() fails past two heartbeat intervals. Alert "
            "KilnResultsNotWritten (above 60s).",
            "s",
            [target("max by (instance) (kiln_server_results_failing_seconds)",
                    "{{instance}}")]), 5, 8),
        (timeseries(
            "Jobs reconciled",
            "Jobs the database said a worker runs but it did not hold (a claim whose reply "
            "was lost, a result that applied nothing), handed back or their result "
            "written again, per interval and queue. Alert KilnJobsReconciled.",
            "short",
            [target(f"sum by (queue) (increase(kiln_jobs_reconciled_total{{{QK}}}[{RATE}]))",
                    "{{queue}}")]), 5, 8),
        (stat(
            "Kind conflicts",
            "Kinds that live servers declare differently (queue, attempts, timeout, "
            "backoff, rate limit), as the workers see it: producers without the handlers "
            "use the newest declaration. `kiln kinds` lists them.",
            "short",
            [target("max by () (kiln_kind_conflicts)", "kinds")], red_above=1), 5, 8),
    ]


def _burn(series: str, window: str, groups: list[tuple[str, float]]) -> str:
    """``series{window}`` over its budget: the burn rate, each group at its objective."""
    parts = [f"{series}{window}{{{m}}} / {1 - o:.10g}" if m else
             f"{series}{window} / {1 - o:.10g}" for m, o in groups]
    return " or ".join(f"({p})" for p in parts) if len(parts) > 1 else parts[0]


def slo_section(c: Config) -> list[tuple[Panel, int, int]]:
    kinds = slo.kind_groups(c)
    queues = [(m, x.objective) for m, x in slo.latency_groups(c)]
    failures, misses = slo.FAILURES, slo.LATENCY_MISSES
    return [
        (row("SLOs"), 24, 1),
        (timeseries(
            "Failure budget burn rate",
            "How fast each kind spends its failure budget: the share of its jobs that "
            "failed for good over 1h and 6h, divided by its budget (1 - objective; 1% by "
            "default). 1 spends the budget in exactly 30 days; alerts "
            "KilnJobFailureBudgetBurning (14.4 over 1h, 6 over 6h) and "
            "KilnJobFailureBudgetSlowBurn (3 over 1d, 1 over 3d).",
            "short",
            [target(_burn(failures, w, [(", ".join(p for p in (m, QK) if p), o)
                                        for m, o in kinds]),
                    f"{{{{queue}}}} {{{{kiln_job_kind}}}} {w}") for w in ("1h", "6h")]),
            12, 8),
        (timeseries(
            "Claim latency budget burn rate",
            "How fast each queue spends its latency budget: the share of claims slower "
            "than the queue's threshold (30s by default) over 1h and 6h, divided by its "
            "budget (1 - objective; 1% by default). Alerts KilnClaimLatencyBudgetBurning "
            "and KilnClaimLatencyBudgetSlowBurn.",
            "short",
            [target(_burn(misses, w, [(", ".join(p for p in (m, Q) if p), o)
                                      for m, o in queues]),
                    f"{{{{queue}}}} {w}") for w in ("1h", "6h")]), 12, 8),
    ]


def tables_section() -> list[tuple[Panel, int, int]]:
    """The jobs table's size and rows (kiln_table_*, max over workers: one publisher)."""
    jobs = 'table="kiln_jobs"'
    return [
        (row("Jobs table"), 24, 1),
        (timeseries(
            "Jobs table size",
            "Size of kiln_jobs with its indexes (PostgreSQL pg_total_relation_size, InnoDB "
            "DATA_LENGTH + INDEX_LENGTH, SQLite the database file). A size that keeps "
            "climbing while the inflow is steady means pruning falls behind: alert "
            "KilnJobsTableGrowing.",
            "bytes",
            [target(f"max by (table) (kiln_table_bytes{{{jobs}}})", "size")]), 12, 8),
        (timeseries(
            "Jobs table rows",
            "Rows in kiln_jobs as the database estimates them (PostgreSQL reltuples, InnoDB "
            "TABLE_ROWS, SQLite the id span) and, on PostgreSQL, dead rows vacuum has not "
            "reclaimed yet: alert KilnJobsTableDeadRows when they stay over half the live "
            "rows.",
            "short",
            [target(f"max by (table) (kiln_table_rows_estimate{{{jobs}}})", "rows"),
             target(f"max by (table) (kiln_table_dead_rows{{{jobs}}})", "dead")]), 12, 8),
    ]


# ------------------------------------------------------------------------- layout
def layout(sections: list[tuple[Panel, int, int]]) -> list[Panel]:
    """Place panels left to right on the 24-column grid, wrapping rows; number them."""
    panels: list[Panel] = []
    x = y = line_height = 0
    for number, (panel, w, h) in enumerate(sections, start=1):
        if x + w > 24 or panel["type"] == "row":
            x, y, line_height = 0, y + line_height, 0
        placed = {"id": number, "gridPos": {"h": h, "w": w, "x": x, "y": y}, **panel}
        if panel["type"] != "row":
            placed["datasource"] = DATASOURCE
            for ref, tgt in zip("ABCDEFGHIJ", placed["targets"], strict=False):
                tgt["refId"] = ref
        panels.append(placed)
        x += w
        line_height = max(line_height, h)
        if panel["type"] == "row":
            x, y, line_height = 0, y + h, 0
    return panels


def variables(c: Config) -> list[dict[str, Any]]:
    def query(name: str, label: str, definition: str, *, multi: bool = True
              ) -> dict[str, Any]:
        current = ({"selected": True, "text": ["All"], "value": ["$__all"]} if multi
                   else {})  # single: Grafana selects the first deployment it lists
        return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
                "definition": definition, "query": definition,
                "refresh": 2, "sort": 1, "regex": "", "hide": 0,
                "includeAll": True, "allValue": ".*", "multi": multi,
                "current": current, "options": []}

    deployment = []
    for i, name in enumerate(c.deployment_labels):
        earlier = ", ".join(f'{x}=~"${x}"' for x in c.deployment_labels[:i])
        inner = ", ".join(p for p in (c.selector, earlier) if p)
        source = "kiln_build_info" if c.joins else "up"
        deployment.append(query(name, name.replace("_", " ").capitalize(),
                                f"label_values({source}{{{inner}}}, {name})", multi=False))
    if c.joins:  # the installation's scrape targets: what scopes every raw series
        chosen = ", ".join(f'{x}=~"${x}"' for x in c.deployment_labels)
        instance = query("instance", "Instance",
                         f"label_values({INSTALLATION_INFO}{{{chosen}}}, instance)")
        del instance["allValue"]  # All: every target of the installation, not every one
        deployment.append(instance)
    return [
        {"name": "datasource", "label": "Data source", "type": "datasource",
         "query": "prometheus", "refresh": 1, "regex": "", "hide": 0,
         "includeAll": False, "multi": False, "current": {}, "options": []},
        *deployment,
        query("queue", "Queue",
              f"label_values(kiln_jobs_available{{{matchers(c, 'raw')}}}, queue)"),
        query("kind", "Kind", f"label_values(kiln_jobs_claimed_total{{{matchers(c, 'raw')}, "
                              f'queue=~"$queue"}}, kiln_job_kind)'),
    ]


def _scope_panels(c: Config, panels: list[Panel]) -> list[Panel]:
    for panel in panels:
        for tgt in panel.get("targets", []):
            tgt["expr"] = scoped(c, tgt["expr"])
    return panels


def overview(c: Config) -> dict[str, Any]:
    sections = [*jobs_section(), *queues_section(), *latency_section(), *rate_limits_section(),
                *slo_section(c),
                *recovery_section(), *servers_section(), *results_section(),
                *tables_section()]
    return {
        "title": "kiln overview",
        "uid": c.dashboard_uid,
        "description": "kiln job runner: throughput, failures, queues, latency, recovery "
                       "and servers, from kilnotel's Prometheus metrics, for the deployment "
                       f"chosen by {', '.join('$' + x for x in c.deployment_labels)}. Needs "
                       "the recording rules of alerts/kiln.recording.yml loaded in "
                       "Prometheus.",
        "tags": list(c.dashboard_tags),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": c.dashboard_timezone,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": c.dashboard_refresh,
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [{"title": link["title"], "url": link["url"], "type": "link",
                   "icon": "external link", "targetBlank": True, "tags": [],
                   "asDropdown": False, "includeVars": False, "keepTime": False,
                   "tooltip": ""} for link in c.dashboard_links],
        "annotations": {"list": [{
            "builtIn": 1, "type": "dashboard", "name": "Annotations & Alerts",
            "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)"}]},
        "templating": {"list": variables(c)},
        "panels": _scope_panels(c, layout(sections)),
    }


def boards(c: Config) -> dict[str, Callable[[], dict[str, Any]]]:
    """File name -> builder of every dashboard."""
    return {OVERVIEW: lambda: overview(c)}


def render(build: Callable[[], dict[str, Any]]) -> str:
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
