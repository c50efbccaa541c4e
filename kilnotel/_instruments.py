"""Creates OpenTelemetry instruments from the names module's Metric records.

Owns the mapping from a Metric's type to an instrument; it never spells a name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry.metrics import (
    CallbackOptions,
    Counter,
    Histogram,
    Meter,
    Observation,
)

from kilnotel._names import Metric

Callback = Callable[[CallbackOptions], Iterable[Observation]]


def counter(meter: Meter, metric: Metric) -> Counter:
    assert metric.type == "counter", metric
    return meter.create_counter(metric.name, unit=metric.unit, description=metric.description)


def histogram(meter: Meter, metric: Metric) -> Histogram:
    assert metric.type == "histogram" and metric.buckets, metric
    return meter.create_histogram(
        metric.name, unit=metric.unit, description=metric.description,
        explicit_bucket_boundaries_advisory=list(metric.buckets),
    )


def observable(meter: Meter, metric: Metric, callback: Callback) -> None:
    """An observable gauge, or an observable counter for a monotonic total."""
    if metric.type == "gauge":
        meter.create_observable_gauge(
            metric.name, callbacks=[callback], unit=metric.unit, description=metric.description
        )
    elif metric.type == "counter":
        meter.create_observable_counter(
            metric.name, callbacks=[callback], unit=metric.unit, description=metric.description
        )
    else:
        raise ValueError(f"{metric.name} is a {metric.type}, not observable")
