"""The histograms fed per job, in two implementations behind one recorder interface.

Owns how a per-job observation (claim latency, job duration, claim query duration,
admission delay) is aggregated:

- ``BucketHistogram``: kilnotel's own explicit-bucket aggregation, for the providers
  that ``prometheus_provider()`` made. One observation is a ``bisect`` and two adds
  (well under a microsecond); the OpenTelemetry SDK's ``Histogram.record`` costs 6 to
  9 µs, which is a tenth of what kiln itself spends on a no-op job. The counts are
  exposed by ``_collector.HistogramCollector`` on the provider's own registry, in the
  families the OpenTelemetry exporter would have produced.
- ``SdkHistogram``: the SDK instrument, for every other MeterProvider (OTLP, in-memory
  readers, a user's own Prometheus reader): the only way to hand an SDK reader a
  histogram is one ``record`` per observation.

Both hand out a recorder per attribute set (``series(key, attrs)``), so the per-job
code looks the attribute set up once and calls ``recorder(value)``. One thread writes
(the server's loop); the collector reads a copy from the exporter's thread. Bucket
semantics are the SDK's: bucket i counts values in ``(bounds[i-1], bounds[i]]``.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from typing import Any

from opentelemetry.metrics import Meter

from kilnotel import _names as n
from kilnotel._names import Metric

Attrs = dict[str, Any]
Recorder = Callable[[float], None]
# a trace or span id: an int from a span's context, hex text from a stored traceparent;
# ints are written as hex only when the collector exposes them (at scrape time)
Id = int | str
TracedRecorder = Callable[[float, Id, Id], None]  # value, trace id, span id
# an exemplar: trace id, span id, the observed value and the wall-clock time of the
# observation (one flat tuple per traced observation; the collector makes its labels)
Exemplar = tuple[Id, Id, float, float]

# The SDK's default cardinality limit and overflow attribute set: past the limit (2,000
# attribute sets unless the provider was made with another), observations fold into one
# series, in both implementations alike.
CARDINALITY_LIMIT = n.CARDINALITY_LIMIT
OVERFLOW_ATTRIBUTES: Attrs = {"otel.metric.overflow": True}
_OVERFLOW_KEY = ("otel.metric.overflow",)


class Buckets:
    """One series: cumulative counts per explicit bucket (the last one is +Inf) and sum."""

    __slots__ = ("attrs", "bounds", "counts", "exemplars", "sum")

    def __init__(self, attrs: Attrs, bounds: tuple[float, ...]) -> None:
        self.attrs = attrs
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.exemplars: list[Exemplar | None] = [None] * (len(bounds) + 1)

    def record(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def record_traced(self, value: float, trace_id: Id, span_id: Id) -> None:
        """``record``, keeping this observation as its bucket's exemplar (the latest
        traced one wins: a bucket links to a recent trace of its range)."""
        index = bisect_left(self.bounds, value)
        self.counts[index] += 1
        self.sum += value
        self.exemplars[index] = (trace_id, span_id, value, time.time())

    def snapshot(self) -> tuple[list[int], float]:
        # a copy of the counts first: a record landing in between shows in the sum
        # only, and both stay monotonic
        return list(self.counts), self.sum


class BucketHistogram:
    """One metric's series for one observer, exported by the provider's collector."""

    def __init__(self, metric: Metric, limit: int = CARDINALITY_LIMIT) -> None:
        assert metric.type == "histogram" and metric.buckets, metric
        self.metric = metric
        self.bounds = metric.buckets
        self.limit = limit
        self.series: dict[tuple[str, ...], Buckets] = {}

    def recorder(self, key: tuple[str, ...], attrs: Attrs) -> Recorder:
        found = self.series.get(key)
        if found is None and len(self.series) >= self.limit:
            key, attrs = _OVERFLOW_KEY, OVERFLOW_ATTRIBUTES
            found = self.series.get(key)
        if found is None:
            found = Buckets(dict(attrs), self.bounds)
            # copy-on-write: the collector iterates the old dict from another thread
            self.series = {**self.series, key: found}
        return found.record

    def traced(self, key: tuple[str, ...], attrs: Attrs) -> TracedRecorder:
        """The recorder of the same series that also keeps exemplars."""
        self.recorder(key, attrs)
        found = self.series.get(key) or self.series[_OVERFLOW_KEY]
        return found.record_traced


class SdkHistogram:
    """One metric as an OpenTelemetry SDK histogram with the names module's buckets."""

    def __init__(self, meter: Meter, metric: Metric) -> None:
        assert metric.type == "histogram" and metric.buckets, metric
        self.instrument = meter.create_histogram(
            metric.name, unit=metric.unit, description=metric.description,
            explicit_bucket_boundaries_advisory=list(metric.buckets),
        )

    def recorder(self, key: tuple[str, ...], attrs: Attrs) -> Recorder:
        record = self.instrument.record

        def recorder(value: float) -> None:
            record(value, attrs)

        return recorder


Histogram = BucketHistogram | SdkHistogram
