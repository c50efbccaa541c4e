"""kilnotel's own histograms expose what the OpenTelemetry exporter would have exposed.

The same events go through EventMetrics twice, each on a prometheus_provider(): once
with the SDK's histograms (read by opentelemetry-exporter-prometheus), once with
kilnotel's bucket counts (read by its own collector). Both expositions must be equal,
family by family, in the text format and in OpenMetrics.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

import kiln
import kiln.events
import kilnotel
from kiln import Outcome
from kiln._model._job import JobRow, JobState
from kiln.events import ClaimQueried, JobCancelled, JobClaimed, JobFinished, JobsAdmitted
from kilnotel import names as n
from kilnotel._cardinality import reader_options
from kilnotel._histograms import CARDINALITY_LIMIT, BucketHistogram, SdkHistogram
from kilnotel._metrics import EventMetrics
from kilnotel._observe import _histograms

NOW = dt.datetime.now(dt.UTC)
HISTOGRAMS = [m for m in n.METRICS if m.type == "histogram"]


def _row(job_id: int, queue: str, kind: str) -> JobRow:
    return JobRow(
        id=job_id, queue=queue, kind=kind, state=JobState.RUNNING, args={}, params={},
        metadata={}, priority=0, run_at=NOW, attempt=1, max_attempts=3, timeout=None,
        backoff=None, errors=[], created_at=NOW, admitted_at=None, attempted_at=NOW,
        finished_at=None, server_id="s", rate_key=None, rescues=0,
    )


def _events() -> list[kiln.events.Event]:
    """Values below, on and above bounds, in several attribute sets."""
    waits = [0.0, 0.001, 0.005, 0.0051, 0.3, 1.0, 2.5, 59.9, 3600.0, 7200.5]
    events: list[kiln.events.Event] = []
    for i, value in enumerate(waits):
        row = _row(i, ("default", "mail")[i % 2], ("ok", "send")[i % 3 == 0])
        events.append(JobClaimed(job=row, latency=value))
        outcome = (Outcome.COMPLETED, Outcome.RETRY, Outcome.FAILED)[i % 3]
        events.append(JobFinished(job=row, outcome=outcome, duration=value / 3))
        events.append(ClaimQueried(queue=row.queue, duration=value / 1000, claimed=1))
        events.append(JobCancelled(job=row, latency=value / 7, stuck=i == 4))
    events.append(JobsAdmitted(key="k", queue="limited", kind="limited", delays=(0.2, 0.4, 99.0)))
    return events


def _expose(make: Callable[[Any, Any], Any]) -> tuple[str, str]:
    provider, registry = kilnotel.prometheus_provider()
    meter = provider.get_meter(n.INSTRUMENTATION_SCOPE, kiln.__version__)
    metrics = EventMetrics(provider, meter, make(provider, meter))
    for event in _events():
        metrics(event)
    try:
        return _text(registry), openmetrics_latest(registry).decode()  # type: ignore[no-untyped-call]
    finally:
        provider.shutdown()


def _text(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def _families(text: str) -> dict[str, str]:
    """Each family's block (HELP, TYPE, samples) by family name."""
    blocks: dict[str, str] = {}
    for block in text.removesuffix("# EOF\n").split("# HELP ")[1:]:
        blocks[block.split(" ", 1)[0]] = block
    return blocks


def _sdk(provider: Any, meter: Any) -> Callable[[n.Metric], SdkHistogram]:
    return lambda metric: SdkHistogram(meter, metric)


def test_bucket_counts_expose_exactly_what_the_sdk_and_exporter_expose() -> None:
    sdk_text, sdk_open = _expose(_sdk)
    own_text, own_open = _expose(_histograms)
    for sdk, own in ((sdk_text, own_text), (sdk_open, own_open)):
        sdk_families, own_families = _families(sdk), _families(own)
        assert set(sdk_families) == set(own_families)
        for metric in HISTOGRAMS:
            name = metric.prometheus_name
            assert own_families[name] == sdk_families[name], name
        # the whole exposition, family order aside
        assert sorted(own_families.values()) == sorted(sdk_families.values())
    assert 'kiln_claim_latency_seconds_bucket{kiln_job_kind="send",' in own_text
    assert 'le="3600.0",otel_scope_name="kilnotel"' in own_text
    assert 'kiln_admission_delay_seconds_count{kiln_job_kind="limited"' in own_text


def test_the_provider_decides_which_histograms() -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    provider, _registry = kilnotel.prometheus_provider()
    other = MeterProvider()
    try:
        assert isinstance(_histograms(provider, provider.get_meter("x"))(n.CLAIM_LATENCY),
                          BucketHistogram)
        assert isinstance(_histograms(other, other.get_meter("x"))(n.CLAIM_LATENCY),
                          SdkHistogram)
    finally:
        provider.shutdown()
        other.shutdown()


@pytest.mark.skipif(
    not reader_options(PrometheusMetricReader, 100),
    reason="an OpenTelemetry SDK older than reader cardinality_limits (1.45): another limit")
def test_attribute_sets_past_the_limit_fold_into_the_overflow_series_like_the_sdk() -> None:
    def expose(make: Callable[[Any, Any], Any]) -> dict[str, str]:
        provider, registry = kilnotel.prometheus_provider()
        histogram = make(provider, provider.get_meter(n.INSTRUMENTATION_SCOPE, kiln.__version__))(
            n.CLAIM_DURATION)
        for i in range(CARDINALITY_LIMIT + 5):
            histogram.recorder((f"q{i}",), {n.QUEUE: f"q{i}"})(0.002 * (i % 7))
        try:
            return _families(_text(registry))
        finally:
            provider.shutdown()

    own = expose(_histograms)[n.CLAIM_DURATION.prometheus_name]
    assert own == expose(_sdk)[n.CLAIM_DURATION.prometheus_name]
    overflow = [line for line in own.splitlines() if 'otel_metric_overflow="true"' in line]
    assert any('le="+Inf"' in line and line.endswith(" 5.0") for line in overflow), overflow


def test_two_observers_of_one_provider_are_summed() -> None:
    provider, registry = kilnotel.prometheus_provider()
    meter = provider.get_meter(n.INSTRUMENTATION_SCOPE, kiln.__version__)
    first = EventMetrics(provider, meter, _histograms(provider, meter))
    second = EventMetrics(provider, meter, _histograms(provider, meter))
    first(JobClaimed(job=_row(1, "default", "ok"), latency=0.02))
    second(JobClaimed(job=_row(2, "default", "ok"), latency=0.2))
    text = _text(registry)
    provider.shutdown()
    lines = [line for line in text.splitlines()
             if line.startswith("kiln_claim_latency_seconds_") and 'kiln_job_kind="ok"' in line]
    assert any(line.startswith("kiln_claim_latency_seconds_count") and line.endswith(" 2.0")
               for line in lines), lines
    assert any('le="0.05"' in line and line.endswith(" 1.0") for line in lines), lines
    assert any(line.startswith("kiln_claim_latency_seconds_sum")
               and abs(float(line.rsplit(" ", 1)[1]) - 0.22) < 1e-9 for line in lines), lines
