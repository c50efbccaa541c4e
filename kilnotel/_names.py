"""Every metric and span name kilnotel emits: the observability contract.

Owns names, units, instrument types, descriptions, attribute keys and histogram
bucket boundaries, plus the OpenTelemetry-to-Prometheus name translation that
dashboards and alert rules are written against. Nothing else in kilnotel spells a
metric name, and this module must not import OpenTelemetry: it is plain data that
docs, dashboards and alert tests read.

Attribute policy: values are low-cardinality (queue, kind, state, outcome,
operation; never job ids). The job's kind is ``kiln.job.kind``, never ``job``,
which collides with Prometheus's own target label. Server gauges carry no server
id: each worker is its own scrape target, and Prometheus's ``instance`` label
tells them apart. Gauges counting the whole database (``kiln.jobs.<state>``,
``kiln.queue.oldest_available.age``) are reported by every worker: aggregate them
with ``max``, not ``sum``.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

InstrumentType = Literal["counter", "histogram", "gauge"]

# ---------------------------------------------------------------- attribute keys
QUEUE = "queue"
KIND = "kiln.job.kind"
OUTCOME = "outcome"
OPERATION = "operation"
CHANGE = "change"  # leader changes: "gained" | "lost"
KEY_GROUP = "key_group"  # kiln.concurrency.in_use: "kind:NAME" | "queue:NAME", never a key
VERSION = "version"  # kiln.build.info: kiln's version
PYTHON_VERSION = "python.version"  # kiln.build.info: the interpreter's (3.11.7)
TABLE = "table"  # kiln.table.*: the kiln table measured (kiln_jobs)
# kiln.rate_limit.*: a rate key ("stripe", "email|42"). Bounded: the per-key counters
# name at most RATE_KEYS_REPORTED keys per process (the busiest), the per-key gauges the
# RATE_KEYS_BACKLOG keys with the most due pending jobs; never every key of a tenant fleet.
RATE_KEY = "rate_key"
RATE_KEYS_REPORTED = 50
RATE_KEYS_BACKLOG = 20
# kiln.build.info: the installation the process's servers (or the exporter) read from:
# a random id made by `kiln migrate` (migration 12), one per kiln database or schema. The
# monitoring mixin joins it onto every kiln series of the target (kiln_installation), so
# a deployment is the installation, never a guess from scrape job names.
INSTALLATION = "kiln.installation"

# ------------------------------------------------------------------------ states
STATES: tuple[str, ...] = (
    "awaiting",
    "pending",
    "scheduled",
    "available",
    "running",
    "completed",
    "failed",
    "cancelled",
)
# values of the ``outcome`` attribute: kiln.Outcome's values
OUTCOMES: tuple[str, ...] = (
    "completed",
    "retry",
    "failed",
    "snoozed",
    "cancelled",
    "handed_back",
)

# values of the ``operation`` attribute of kiln.db.errors: the store operations whose
# failures the core reports (kiln.events.StoreFailed); each is exported at 0 from the start
DB_OPERATIONS: tuple[str, ...] = (
    "job_claim",
    "job_results_apply",
    "server_heartbeat",
    "leader_elect",
    "jobs_running_on",
    "jobs_cancel_requested",
    "bus_publish",  # not the store's: a wake-up the Bus could not send
)
# values of the ``change`` attribute of kiln.server.leader.changes
LEADER_CHANGES: tuple[str, ...] = ("gained", "lost")

# ------------------------------------------------------------ series budget
# The OpenTelemetry SDK keeps at most a reader's cardinality limit of series per
# instrument (2,000 unless configured: prometheus_provider(cardinality_limit=...),
# otlp_providers(...), kiln worker --metrics-cardinality-limit) and folds the rest into one
# series labelled otel_metric_overflow="true"; kilnotel's own histograms keep the same
# limit. A server seeds at 0 at most half of the limit of kiln.jobs.finished (the widest
# instrument: queue x kind x 6 outcomes), whatever the number of kinds it declares, which
# leaves the other half to pairs met at run time (a seeded-out kind's first completion, a
# kind enqueued into a queue other than its own).
CARDINALITY_LIMIT = 2000


def seed_budget(limit: int) -> int:
    """The series of kiln.jobs.finished a server seeds at 0 under ``limit``."""
    return limit // 2


SEED_BUDGET = seed_budget(CARDINALITY_LIMIT)
OVERFLOW_LABEL = "otel_metric_overflow"

# ------------------------------------------------------- histogram boundaries (s)
# Waits (ready to claimed, created to admitted): milliseconds when idle, up to an
# hour when a queue backs up, so the tail goes to tens of minutes.
WAIT_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
)
# Handler run time: a no-op job to the default 30 minute timeout and beyond.
DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 900.0, 1800.0, 3600.0,
)
# A cancel to the end of the handler it stopped: milliseconds with a notification, up
# to heartbeat_interval without one, plus a plain def handler's time to return (up to
# kill_grace).
CANCEL_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
)
# One database round trip.
QUERY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


@dataclasses.dataclass(frozen=True, slots=True)
class Metric:
    """One instrument: its OpenTelemetry name and everything a reader needs."""

    name: str
    type: InstrumentType
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None  # histograms only

    @property
    def prometheus_name(self) -> str:
        """The family name after the exporter's translation (see prometheus_name())."""
        return prometheus_name(self.name, self.unit, self.type)

    @property
    def prometheus_samples(self) -> tuple[str, ...]:
        """Sample names as they appear in /metrics."""
        base = self.prometheus_name
        if self.type == "histogram":
            return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
        return (base,)

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        return tuple(prometheus_label(a) for a in self.attributes)


_UNIT_SUFFIX = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "%": "percent"}
_INVALID = re.compile(r"[^a-zA-Z0-9:]")


def prometheus_label(attribute: str) -> str:
    """An attribute key as a Prometheus label (``kiln.job.kind`` → ``kiln_job_kind``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", attribute)


def prometheus_name(name: str, unit: str, type_: InstrumentType) -> str:
    """The Prometheus family name opentelemetry-exporter-prometheus gives an instrument.

    Characters outside ``[a-zA-Z0-9:]`` become ``_``; unit ``s`` adds ``_seconds``;
    units ``1`` and ``{...}`` add nothing; counters get ``_total``. So the gauge
    ``kiln.jobs.failed`` (``{job}``) is ``kiln_jobs_failed``.
    """
    out = _INVALID.sub("_", name)
    suffix = "" if unit == "1" or unit.startswith("{") else _UNIT_SUFFIX.get(unit, unit)
    if suffix and not out.endswith(f"_{suffix}"):
        out = f"{out}_{suffix}"
    if type_ == "counter" and not out.endswith("_total"):
        out = f"{out}_total"
    return out


def _state_gauge(state: str) -> Metric:
    return Metric(
        f"kiln.jobs.{state}", "gauge", "{job}",
        f"Jobs in state {state} in the database, by queue (zero-filled for every known "
        "queue; a cached store count, refreshed every counts_ttl seconds; on PostgreSQL "
        "exact up to 100 per queue, above that an estimate from a sample of the table; "
        "aggregate with max)",
        (QUEUE,),
    )


JOBS_BY_STATE: dict[str, Metric] = {s: _state_gauge(s) for s in STATES}
JOBS_FAILED = JOBS_BY_STATE["failed"]

QUEUE_OLDEST_AVAILABLE_AGE = Metric(
    "kiln.queue.oldest_available.age", "gauge", "s",
    "Age of the oldest available job per queue, from its run_at by the database clock "
    "(0 when none; cached like the state gauges; aggregate with max)",
    (QUEUE,),
)
KIND_CONFLICTS = Metric(
    "kiln.kind.conflicts", "gauge", "{kind}",
    "Kinds that live servers declare differently (queue, attempts, timeout, backoff, "
    "rate limit); producers without the handlers use the newest declaration (cached "
    "like the state gauges; aggregate with max)",
)
CONCURRENCY_IN_USE = Metric(
    "kiln.concurrency.in_use", "gauge", "{job}",
    "Running jobs under a global concurrency limit (kiln.Concurrency), by key group: "
    "kind:NAME for a kind's limit (every key of the kind together, never per tenant), "
    "queue:NAME for a queue's; zero-filled once seen (cached like the state gauges; "
    "aggregate with max)", (KEY_GROUP,),
)
JOBS_UNHANDLED = Metric(
    "kiln.jobs.unhandled", "gauge", "{job}",
    "Available jobs that no live server handles in their queue, by queue and kind: "
    "enqueued before any server declared their kind, or left in a queue a deploy moved "
    "their kind away from (Client.unhandled); zero-filled once seen (cached like the "
    "state gauges; aggregate with max)", (QUEUE, KIND),
)

COUNTS_AGE = Metric(
    "kiln.counts.age", "gauge", "s",
    "Seconds since this worker last read the database-wide counts (kiln.jobs.<state>, "
    "the oldest available age); exported only by the worker that publishes them",
)
COUNTS_REFRESH_FAILURES = Metric(
    "kiln.counts.refresh_failures", "counter", "{refresh}",
    "Reads of the database-wide counts that failed (the counts vanish after "
    "counts_max_age without a successful one)",
)

_SIZES = ("read from the database's catalog statistics every sizes_ttl seconds by the "
          "worker that publishes the counts; aggregate with max")
TABLE_ROWS_ESTIMATE = Metric(
    "kiln.table.rows_estimate", "gauge", "{row}",
    "Rows in a kiln table, estimated (PostgreSQL reltuples, InnoDB TABLE_ROWS, SQLite's "
    f"id span); {_SIZES}",
    (TABLE,),
)
TABLE_DEAD_ROWS = Metric(
    "kiln.table.dead_rows", "gauge", "{row}",
    "Dead tuples in a kiln table that vacuum has not reclaimed yet (PostgreSQL only, "
    f"n_dead_tup); {_SIZES}",
    (TABLE,),
)
TABLE_BYTES = Metric(
    "kiln.table.bytes", "gauge", "By",
    "Size of a kiln table with its indexes (PostgreSQL pg_total_relation_size, InnoDB "
    f"DATA_LENGTH + INDEX_LENGTH, SQLite the whole database file); {_SIZES}",
    (TABLE,),
)
TABLE_FREE_BYTES = Metric(
    "kiln.table.free_bytes", "gauge", "By",
    "Allocated but unused space of a kiln table (InnoDB DATA_FREE, SQLite free pages; "
    f"absent on PostgreSQL, see kiln.table.dead_rows); {_SIZES}",
    (TABLE,),
)

CLAIM_LATENCY = Metric(
    "kiln.claim.latency", "histogram", "s",
    "Time from a job becoming ready (run_at, or admission) to being claimed",
    (QUEUE, KIND), WAIT_BUCKETS,
)
ADMISSION_DELAY = Metric(
    "kiln.admission.delay", "histogram", "s",
    "Time from a rate-limited job's creation to its admission (pending to available)",
    (QUEUE, KIND), WAIT_BUCKETS,
)
JOB_DURATION = Metric(
    "kiln.job.duration", "histogram", "s",
    "Run time of one attempt, by kind and outcome",
    (QUEUE, KIND, OUTCOME), DURATION_BUCKETS,
)
CANCEL_LATENCY = Metric(
    "kiln.cancel.latency", "histogram", "s",
    "Time from a running job's cancel (client.cancel, the CLI, the dashboard) to the end "
    "of its handler on this server (for a plain def handler that ignores job.cancelled, "
    "to when kiln gave up on it after kill_grace)",
    (QUEUE, KIND), CANCEL_BUCKETS,
)
CLAIM_DURATION = Metric(
    "kiln.claim.duration", "histogram", "s",
    "Duration of one claim query round trip, whether or not it claimed anything",
    (QUEUE,), QUERY_BUCKETS,
)

JOBS_ENQUEUED = Metric(
    "kiln.jobs.enqueued", "counter", "{job}",
    "Jobs inserted by this process (client or server)", (QUEUE, KIND),
)
JOBS_CLAIMED = Metric(
    "kiln.jobs.claimed", "counter", "{job}", "Jobs claimed by this server", (QUEUE, KIND),
)
# Not "kiln.jobs.completed": that is the gauge of jobs in state completed, and one
# name for a gauge and a counter is a conflict in OpenTelemetry and a duplicate
# family (kiln_jobs_completed) in the OpenMetrics exposition.
JOBS_FINISHED = Metric(
    "kiln.jobs.finished", "counter", "{job}",
    "Attempts that ended on this server, by outcome (completed, retry, failed = failed "
    "for good, snoozed, cancelled, handed_back)",
    (QUEUE, KIND, OUTCOME),
)
JOBS_RETRIED = Metric(
    "kiln.jobs.retried", "counter", "{job}",
    "Attempts that failed and were scheduled again after backoff", (QUEUE, KIND),
)
JOBS_RESCUED = Metric(
    "kiln.jobs.rescued", "counter", "{job}",
    "Jobs of dead servers rescued by this server (as leader), by outcome (retry, failed)",
    (QUEUE, KIND, OUTCOME),
)
JOBS_HANDED_BACK = Metric(
    "kiln.jobs.handed_back", "counter", "{job}",
    "Jobs returned to their queue at shutdown without using an attempt", (QUEUE, KIND),
)
JOBS_STUCK = Metric(
    "kiln.jobs.stuck", "counter", "{job}",
    "Attempts kiln gave up on while their handler went on running (a plain def handler "
    "past kill_grace after its timeout, shutdown or fence; an async one that ignored "
    "its cancellation at a fence)", (QUEUE, KIND),
)
JOBS_STRANDED = Metric(
    "kiln.jobs.stranded", "counter", "{job}",
    "Awaiting jobs the leader's sweeper released because every dependency was completed "
    "or gone and nothing else would have released them; any increase means a release "
    "was missed", (QUEUE,),
)
DB_ERRORS = Metric(
    "kiln.db.errors", "counter", "{error}",
    "Store operations (and Bus publishes) that raised, by operation", (OPERATION,),
)

SERVER_HEALTHY = Metric(
    "kiln.server.healthy", "gauge", "1",
    "1 when server.healthy() is true (not fenced, heartbeat fresh, results flowing)",
)
SERVER_LEADER = Metric("kiln.server.leader", "gauge", "1", "1 while this server is the leader")
SERVER_RUNNING = Metric(
    "kiln.server.running", "gauge", "{job}", "Jobs running on this server, by queue", (QUEUE,),
)
SERVER_CONCURRENCY = Metric(
    "kiln.server.concurrency", "gauge", "{job}",
    "Concurrency of this server's pool, by queue: the configured value, or the one set "
    "at runtime (kiln queues concurrency)", (QUEUE,),
)
QUEUE_PAUSED = Metric(
    "kiln.queue.paused", "gauge", "1",
    "1 while the queue is paused (kiln queues pause), as this server's governor last read "
    "the controls; reported for each queue the server serves, and by kiln exporter for "
    "every known queue: aggregate with max",
    (QUEUE,),
)
SERVER_HANDLERS_STUCK = Metric(
    "kiln.server.handlers.stuck", "gauge", "{handler}",
    "Handlers still running after kiln gave up on their attempt, by queue; each keeps a "
    "slot of its queue taken until it returns", (QUEUE,),
)
SERVER_OLDEST_RUNNING_AGE = Metric(
    "kiln.server.oldest_running.age", "gauge", "s",
    "Seconds the longest-running attempt on this server has run, by queue (0 when none; "
    "from its attempted_at, by this host's clock)",
    (QUEUE,),
)
BUILD_INFO = Metric(
    "kiln.build.info", "gauge", "1",
    "Always 1 while a server is observed (or kiln exporter runs); its attributes carry "
    "kiln's and Python's versions and the installation id of the database it reads "
    "(once read: the first heartbeat), which rules join onto every kiln series",
    (VERSION, PYTHON_VERSION, INSTALLATION),
)
QUEUE_SCHEDULED_DUE = Metric(
    "kiln.queue.scheduled_due", "gauge", "{job}",
    "Scheduled jobs whose run_at has come that the releaser has not made available yet, "
    "by queue (published by kiln exporter, which reads it every counts_ttl; work that "
    "waits as much as the available jobs do; aggregate with max)",
    (QUEUE,),
)
QUEUE_SERVERS = Metric(
    "kiln.queue.servers", "gauge", "{server}",
    "Live servers that serve the queue, by the database: registered, with a heartbeat "
    "younger than the exporter's stale_after (published by kiln exporter, whether or not "
    "any worker is scraped; 0 for a known queue that no server serves; aggregate with max)",
    (QUEUE,),
)
EVENTS_SUBSCRIBER_ERRORS = Metric(
    "kiln.events.subscriber_errors", "counter", "{error}",
    "Exceptions raised by event subscribers (kilnotel's own included), caught and logged "
    "by the hub: the metrics and spans they feed miss those events",
)
RATE_KEYS_UNDECLARED = Metric(
    "kiln.rate_keys.undeclared", "gauge", "{key}",
    "Rate keys with pending jobs but no declared rate limit, as this server's admitter last "
    "saw them: their jobs are admitted only once a kind or an enqueue declares the key "
    "(every worker reports the same database: aggregate with max)",
)
RATE_LIMIT_ADMITTED = Metric(
    "kiln.rate_limit.admitted", "counter", "{job}",
    "Jobs this server's admitter admitted, by rate key (the busiest keys of the process: "
    "at most 50 keys at a time; sum over instances, compare with kiln.rate_limit.rate)",
    (RATE_KEY,),
)
RATE_LIMIT_STARTED = Metric(
    "kiln.rate_limit.started", "counter", "{job}",
    "Attempts of rate-limited jobs this server started (counted at the claim that hands "
    "them to a slot), by rate key, for the same keys as kiln.rate_limit.admitted; sum over "
    "instances",
    (RATE_KEY,),
)
RATE_LIMIT_RATE = Metric(
    "kiln.rate_limit.rate", "gauge", "{job}",
    "The configured rate of a rate key, in jobs per second (rate / per), for the 20 keys "
    "with the most due pending jobs (cached like the state gauges; aggregate with max)",
    (RATE_KEY,),
)
RATE_LIMIT_BACKLOG = Metric(
    "kiln.rate_limit.backlog", "gauge", "{job}",
    "Pending jobs of a rate key that are due (waiting for admission), for the 20 keys with "
    "the most (0 once a key listed before has none; cached like the state gauges; "
    "aggregate with max)",
    (RATE_KEY,),
)
RATE_LIMIT_LAG = Metric(
    "kiln.rate_limit.lag", "gauge", "s",
    "Admission lag of a rate key: how far behind its rate its backlog is, the seconds its "
    "due pending jobs take to admit at the configured rate (backlog x per / rate); absent "
    "for an undeclared key (cached like the state gauges; aggregate with max)",
    (RATE_KEY,),
)
SERVER_RESULTS_PENDING = Metric(
    "kiln.server.results_pending", "gauge", "{result}",
    "Results computed but not yet written to the store",
)
SERVER_CONNECTIONS = Metric(
    "kiln.server.connections", "gauge", "{connection}",
    "Database connections this server's process holds open now (its store's pool and "
    "LISTEN connection, and the App's client stores): to the pooler when it is behind "
    "one; sum over instances for the fleet's",
)
SERVER_HEARTBEAT_AGE = Metric(
    "kiln.server.heartbeat.age", "gauge", "s",
    "Seconds since this server's last confirmed heartbeat",
)
SERVER_HEARTBEAT_FAILURES = Metric(
    "kiln.server.heartbeat.failures", "counter", "{heartbeat}",
    "Heartbeats that could not be confirmed",
)
SERVER_LEADER_CHANGES = Metric(
    "kiln.server.leader.changes", "counter", "{change}",
    "Leadership gained or lost by this server", (CHANGE,),
)
SERVER_FENCED = Metric(
    "kiln.server.fenced", "counter", "{fence}",
    "Times this server fenced itself off (stale heartbeat)",
)
NOTIFIER_UP = Metric(
    "kiln.notifier.up", "gauge", "1",
    "1 while the notification channel (LISTEN or a bus) is connected, 0 when down; "
    "absent for stores that run without one",
)
RESULTS_POISONED = Metric(
    "kiln.results.poisoned", "counter", "{result}",
    "Results the store refused (the rest of their batch was written) that were written "
    "as failed attempts saying why instead",
)
RESULTS_DROPPED = Metric(
    "kiln.results.dropped", "counter", "{result}",
    "Results that could not be written at all, not even as failed attempts, while others "
    "were: their jobs stay running until reconciliation hands them back or a rescue",
)
RESULTS_UNAPPLIED = Metric(
    "kiln.results.unapplied", "counter", "{result}",
    "Results written that applied nothing (fenced: the job was rescued, cancelled or "
    "handed over, or the claim that ran it never committed)",
)
SERVER_RESULTS_FAILING = Metric(
    "kiln.server.results.failing", "gauge", "s",
    "Seconds since this server's result writes began to fail (0 while they succeed); "
    "healthy() fails past two heartbeat intervals",
)
SERVER_COMPLETER_CRASHES = Metric(
    "kiln.server.completer.crashes", "counter", "{crash}",
    "Times the results writer task crashed (it is restarted; healthy() fails for 30 s)",
)
JOBS_RECONCILED = Metric(
    "kiln.jobs.reconciled", "counter", "{job}",
    "Jobs the database said this server runs but it did not hold (a claim whose reply "
    "was lost, a result that applied nothing), handed back or written again",
    (QUEUE, KIND),
)
EVENTS_DROPPED = Metric(
    "kiln.events.dropped", "counter", "{event}",
    "Events dropped because a queued subscriber's queue was full",
)

METRICS: tuple[Metric, ...] = (
    *JOBS_BY_STATE.values(),
    QUEUE_OLDEST_AVAILABLE_AGE,
    KIND_CONFLICTS,
    COUNTS_AGE,
    COUNTS_REFRESH_FAILURES,
    TABLE_ROWS_ESTIMATE,
    TABLE_DEAD_ROWS,
    TABLE_BYTES,
    TABLE_FREE_BYTES,
    CLAIM_LATENCY,
    ADMISSION_DELAY,
    JOB_DURATION,
    CANCEL_LATENCY,
    CLAIM_DURATION,
    JOBS_ENQUEUED,
    JOBS_CLAIMED,
    JOBS_FINISHED,
    JOBS_RETRIED,
    JOBS_RESCUED,
    JOBS_HANDED_BACK,
    JOBS_STUCK,
    JOBS_STRANDED,
    DB_ERRORS,
    SERVER_HEALTHY,
    SERVER_LEADER,
    SERVER_RUNNING,
    SERVER_CONCURRENCY,
    SERVER_HANDLERS_STUCK,
    SERVER_OLDEST_RUNNING_AGE,
    BUILD_INFO,
    EVENTS_SUBSCRIBER_ERRORS,
    RATE_KEYS_UNDECLARED,
    RATE_LIMIT_ADMITTED,
    RATE_LIMIT_STARTED,
    RATE_LIMIT_RATE,
    RATE_LIMIT_BACKLOG,
    RATE_LIMIT_LAG,
    SERVER_RESULTS_PENDING,
    SERVER_CONNECTIONS,
    SERVER_HEARTBEAT_AGE,
    SERVER_HEARTBEAT_FAILURES,
    SERVER_LEADER_CHANGES,
    SERVER_FENCED,
    NOTIFIER_UP,
    EVENTS_DROPPED,
    RESULTS_POISONED,
    RESULTS_DROPPED,
    RESULTS_UNAPPLIED,
    SERVER_RESULTS_FAILING,
    SERVER_COMPLETER_CRASHES,
    JOBS_RECONCILED,
    QUEUE_PAUSED,
    CONCURRENCY_IN_USE,
    JOBS_UNHANDLED,
    QUEUE_SCHEDULED_DUE,
    QUEUE_SERVERS,
)
BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
BY_PROMETHEUS_NAME: dict[str, Metric] = {m.prometheus_name: m for m in METRICS}


def prometheus_names() -> frozenset[str]:
    """Every sample name kilnotel can expose, for checking dashboards and alert rules."""
    return frozenset(s for m in METRICS for s in m.prometheus_samples)


# ------------------------------------------------------------------------- spans
INSTRUMENTATION_SCOPE = "kilnotel"
# The producer's context goes into job.metadata under the propagator's own keys
# (W3C: "traceparent", "tracestate"), like message headers.
TRACE_CONTEXT_KEYS: tuple[str, ...] = ("traceparent", "tracestate")
SPAN_SEND = "send {queue}"  # PRODUCER, at enqueue
SPAN_PROCESS = "process {queue}"  # CONSUMER, one per attempt

MESSAGING_SYSTEM = "messaging.system"
MESSAGING_SYSTEM_VALUE = "kiln"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_OPERATION_NAME = "messaging.operation.name"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"  # on the send span of a batch
ERROR_TYPE = "error.type"  # failed attempts: the exception's qualified class name
SPAN_JOB_IDS = "kiln.job.ids"  # the send span of a batch: its jobs' ids (the first 1000)
SPAN_JOB_IDS_MAX = 1000
SPAN_ATTEMPT = "kiln.job.attempt"
SPAN_OUTCOME = "kiln.job.outcome"
SPAN_RETRY_IN = "kiln.job.retry_in"  # seconds, on the retry event
SPAN_RESCUES = "kiln.job.rescues"  # rescues in a row, on the rescued event

# span events
EVENT_RETRY = "kiln.job.retry"  # attempt failed, scheduled again
EVENT_SNOOZED = "kiln.job.snoozed"
EVENT_HANDED_BACK = "kiln.job.handed_back"  # shutdown
EVENT_RESCUED = "kiln.job.rescued"  # the leader rescued this job from a dead server

SPANS: tuple[tuple[str, str, str], ...] = (
    (SPAN_SEND, "PRODUCER", "one per insert (one job, or a batch), around it"),
    (SPAN_PROCESS, "CONSUMER", "one per attempt, around the handler"),
)
SPAN_EVENTS: tuple[str, ...] = (EVENT_RETRY, EVENT_SNOOZED, EVENT_HANDED_BACK, EVENT_RESCUED)
