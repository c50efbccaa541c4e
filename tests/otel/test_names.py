"""The names module is the contract: checked against the real exporter's translation."""

from __future__ import annotations

import re
import types
from pathlib import Path

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

import kiln
import kilnotel
from kilnotel import names as n

PACKAGE = Path(kilnotel.__file__).parent


def _expose_every_metric() -> str:
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    meter = provider.get_meter("kilnotel")
    for metric in n.METRICS:
        attrs = {a: "x" for a in metric.attributes}
        if metric.type == "counter":
            meter.create_counter(metric.name, unit=metric.unit).add(1, attrs)
        elif metric.type == "histogram":
            assert metric.buckets is not None
            meter.create_histogram(
                metric.name, unit=metric.unit,
                explicit_bucket_boundaries_advisory=list(metric.buckets),
            ).record(0.02, attrs)
        else:
            def gauge(options: CallbackOptions, a: dict[str, str] = attrs) -> list[Observation]:
                return [Observation(1, a)]

            meter.create_observable_gauge(metric.name, callbacks=[gauge], unit=metric.unit)
    try:
        exposition: bytes = generate_latest(registry) + openmetrics_latest(registry)  # type: ignore[no-untyped-call]
        return exposition.decode()
    finally:
        provider.shutdown()


def test_prometheus_names_match_the_exporter() -> None:
    text = _expose_every_metric()
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
               if line and not line.startswith("#")}
    assert samples - {"target_info"} >= n.prometheus_names()
    for metric in n.METRICS:
        family = metric.prometheus_name
        kind = {"counter": "counter", "histogram": "histogram", "gauge": "gauge"}[metric.type]
        assert f"# TYPE {family} {kind}" in text, family
        for label in metric.prometheus_labels:
            assert re.search(rf"^{family}\w*{{[^}}]*\b{label}=", text, re.M), (family, label)


def test_the_names_operators_rely_on() -> None:
    assert n.JOBS_FAILED.prometheus_name == "kiln_jobs_failed"
    assert n.BY_NAME["kiln.jobs.failed"].type == "gauge"
    assert n.CLAIM_LATENCY.prometheus_samples == (
        "kiln_claim_latency_seconds_bucket", "kiln_claim_latency_seconds_sum",
        "kiln_claim_latency_seconds_count",
    )
    assert n.JOBS_FINISHED.prometheus_name == "kiln_jobs_finished_total"
    assert n.QUEUE_OLDEST_AVAILABLE_AGE.prometheus_name == "kiln_queue_oldest_available_age_seconds"
    assert n.ADMISSION_DELAY.prometheus_name == "kiln_admission_delay_seconds"
    assert n.SERVER_HEARTBEAT_AGE.prometheus_name == "kiln_server_heartbeat_age_seconds"
    assert n.DB_ERRORS.prometheus_labels == ("operation",)
    assert n.JOB_DURATION.prometheus_labels == ("queue", "kiln_job_kind", "outcome")


def test_names_are_unique_in_opentelemetry_and_in_openmetrics() -> None:
    otel = [m.name.lower() for m in n.METRICS]
    assert len(otel) == len(set(otel))
    # an OpenMetrics counter family drops _total: it must not collide with a gauge
    families = [m.prometheus_name.removesuffix("_total") for m in n.METRICS]
    assert len(families) == len(set(families)), sorted(families)


def test_every_state_and_outcome_is_covered() -> None:
    assert tuple(s.value for s in kiln.JobState) == n.STATES
    assert tuple(o.value for o in kiln.Outcome) == n.OUTCOMES
    assert set(n.JOBS_BY_STATE) == set(n.STATES)


def test_attributes_are_low_cardinality_and_do_not_collide_with_target_labels() -> None:
    # the build info's versions: one value per process; table: the kiln tables measured;
    # key_group: a declared concurrency limit's group (kind:NAME or queue:NAME, never a key);
    # the installation: one value per database, on the build info only; rate_key: at most
    # RATE_KEYS_REPORTED keys per process (counters) and RATE_KEYS_BACKLOG (gauges), never
    # every tenant (tests/otel/test_rate_key_tally.py)
    allowed = {n.QUEUE, n.KIND, n.OUTCOME, n.OPERATION, n.CHANGE, n.VERSION, n.PYTHON_VERSION,
               n.TABLE, n.KEY_GROUP, n.INSTALLATION, n.RATE_KEY}
    assert n.RATE_KEYS_REPORTED <= 50 and n.RATE_KEYS_BACKLOG <= 50
    for metric in n.METRICS:
        assert set(metric.attributes) <= allowed, metric.name
        assert not {"job", "instance", "le", "job_id", "server"} & set(metric.prometheus_labels)


def test_buckets_are_seconds_with_a_long_tail() -> None:
    for metric in n.METRICS:
        assert (metric.buckets is not None) == (metric.type == "histogram"), metric.name
        if metric.buckets:
            assert metric.unit == "s"
            assert list(metric.buckets) == sorted(set(metric.buckets)), metric.name
    assert n.WAIT_BUCKETS[0] <= 0.005 and n.WAIT_BUCKETS[-1] >= 30 * 60
    assert n.DURATION_BUCKETS[-1] >= 1800  # the default job timeout
    assert 0.05 in n.WAIT_BUCKETS and 1.0 in n.WAIT_BUCKETS


def test_no_module_but_the_names_module_spells_a_metric_name() -> None:
    literal = re.compile(r"""["']kiln\.[a-z_.]+["']""")
    for path in PACKAGE.glob("*.py"):
        if path.name != "_names.py":
            assert not literal.findall(path.read_text()), path.name


def test_public_surface() -> None:
    assert kilnotel.__all__ == sorted(kilnotel.__all__)
    assert set(kilnotel.__all__) == {
        "MetricsServer", "Observer", "names", "observe", "observe_app", "observe_client",
        "prometheus_provider", "serve", "TraceContextFilter",
        "OtlpConfigError", "OtlpExport", "export_otlp", "otlp_providers",
        "QueueExporter",  # issue 42: the queue state without a worker (kiln exporter)
        "ProducerSampler",  # issue 42: an attempt is traced when its producer was
    }
    # "@py_builtins" and "@pytest_ar": pytest rewrites the asserts of the distributions
    # that register a pytest11 plugin, as kiln-jobs does (kiln.testing)
    # a submodule another test imported (kilnotel.mixin) is an attribute, not an export
    public = {k for k, v in vars(kilnotel).items() if not k.startswith(("_", "@"))
              and (k in kilnotel.__all__ or not isinstance(v, types.ModuleType))}
    assert public == set(kilnotel.__all__)


def test_db_operations_are_the_ones_the_core_reports() -> None:
    """kiln.db.errors is exported at 0 for each operation in the names module: the list
    must be exactly the operations the core emits StoreFailed for."""
    core = Path(kiln.__file__).parent
    emitted = {
        op for path in core.rglob("*.py")
        for op in re.findall(r"StoreFailed\(\s*operation=\"([a-z_]+)\"", path.read_text())
    }
    assert emitted == set(n.DB_OPERATIONS)
    assert n.LEADER_CHANGES == ("gained", "lost")
