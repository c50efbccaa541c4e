"""The prometheus_client collector that exposes kilnotel's own histograms.

Owns the translation of ``_histograms.BucketHistogram`` series into Prometheus
histogram families, written to match what opentelemetry-exporter-prometheus produces
for the same SDK histogram, byte for byte: family ``kiln_claim_latency_seconds`` (the
names module's Prometheus name, unit ``seconds``), the description as HELP, label
names sorted, the ``otel_scope_name``/``otel_scope_version``/``otel_scope_schema_url``
labels, ``le`` written as Python writes the float bound (``0.005``, ``1.0``, ``+Inf``),
cumulative bucket counts, ``_count`` and ``_sum``. A test holds the two expositions
to each other. One collector per MeterProvider, registered on its registry, merging
the series of every observer that uses the provider. It runs on the scraping thread
and reads only memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.samples import Exemplar

from kilnotel._histograms import BucketHistogram
from kilnotel._histograms import Exemplar as StoredExemplar
from kilnotel._names import Metric

_LABEL = re.compile(r"[^a-zA-Z0-9]+")  # the exporter's attribute-key sanitizing
_UNITS = {"s": "seconds"}  # the only unit kilnotel's histograms use


def _label_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _exemplar(example: StoredExemplar) -> Exemplar:
    """The OpenMetrics exemplar of a stored one: its ids as W3C hex, formatted here (on
    the scraping thread) rather than on every traced observation."""
    trace_id, span_id, value, timestamp = example
    return Exemplar({
        "trace_id": trace_id if isinstance(trace_id, str) else f"{trace_id:032x}",
        "span_id": span_id if isinstance(span_id, str) else f"{span_id:016x}",
    }, value, timestamp)


class HistogramCollector:
    """Registered on a CollectorRegistry; ``add`` a BucketHistogram to expose it."""

    def __init__(self, registry: CollectorRegistry, scope_name: str, scope_version: str) -> None:
        self._scope = {
            "otel_scope_name": scope_name,
            "otel_scope_version": scope_version,
            "otel_scope_schema_url": "",
        }
        self._histograms: list[BucketHistogram] = []
        registry.register(self)

    def add(self, histogram: BucketHistogram) -> None:
        self._histograms = [*self._histograms, histogram]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        by_metric: dict[str, list[BucketHistogram]] = {}
        for histogram in self._histograms:
            by_metric.setdefault(histogram.metric.name, []).append(histogram)
        for histograms in by_metric.values():
            family = self._family(histograms[0].metric, histograms)
            if family is not None:
                yield family

    def _family(
        self, metric: Metric, histograms: Iterable[BucketHistogram]
    ) -> HistogramMetricFamily | None:
        merged: dict[tuple[tuple[str, str], ...], tuple[list[int], float]] = {}
        exemplars: dict[tuple[tuple[str, str], ...], list[Any]] = {}
        keys: set[str] = set(self._scope)
        for histogram in histograms:
            for series in list(histogram.series.values()):
                labels = {**self._scope}
                for key, value in series.attrs.items():
                    labels[_LABEL.sub("_", key)] = _label_value(value)
                keys.update(labels)
                ident = tuple(sorted(labels.items()))
                counts, total = series.snapshot()
                seen = merged.get(ident)
                if seen is not None:
                    counts = [a + b for a, b in zip(counts, seen[0], strict=True)]
                    total += seen[1]
                merged[ident] = (counts, total)
                if any(series.exemplars):
                    exemplars[ident] = list(series.exemplars)
        if not merged:
            return None  # like the SDK: no family before the first observation
        label_names = sorted(keys)
        family = HistogramMetricFamily(
            metric.prometheus_name, metric.description, labels=label_names,
            unit=_UNITS.get(metric.unit, ""),
        )
        bounds = [f"{b}" for b in metric.buckets or ()] + ["+Inf"]
        for ident, (counts, total) in merged.items():
            labels = dict(ident)
            cumulative, buckets = 0, list[Any]()
            examples = exemplars.get(ident) or [None] * len(bounds)
            for bound, count, example in zip(bounds, counts, examples, strict=True):
                cumulative += count
                # exemplars appear only in the OpenMetrics exposition, as Prometheus asks it
                buckets.append((bound, cumulative) if example is None
                               else (bound, cumulative, _exemplar(example)))
            family.add_metric([labels.get(k, "") for k in label_names], buckets, total)
        return family
