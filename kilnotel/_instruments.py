"""Creates OpenTelemetry counters and observable instruments from Metric records.

Owns the mapping from a Metric's type to an instrument (histograms: ``_histograms``),
the per-provider registry of observable instruments (registering one twice on a meter
keeps only the first callback, so each provider gets one set, fed by every observer
that uses it), and Tally, the cheap counter behind the per-job counts. It never
spells a name.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from opentelemetry.metrics import (
    CallbackOptions,
    Counter,
    Meter,
    Observation,
)

from kilnotel._names import Metric

Callback = Callable[[CallbackOptions], Iterable[Observation]]
T = TypeVar("T")
Attrs = dict[str, str]


def counter(meter: Meter, metric: Metric) -> Counter:
    assert metric.type == "counter", metric
    return meter.create_counter(metric.name, unit=metric.unit, description=metric.description)


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


_SHARED: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def shared(provider: Any, name: str, factory: Callable[[], T]) -> T:
    """The one ``name`` object of ``provider``, made by ``factory`` on first use."""
    objects = _SHARED.get(provider)
    if objects is None:
        objects = _SHARED[provider] = {}
    found = objects.get(name)
    if found is None:
        found = objects[name] = factory()
    return found


class Tally:
    """Cumulative counts by attribute set, exported through an observable counter.

    A synchronous OpenTelemetry counter costs microseconds per add in Python; this
    costs a dict lookup, which matters at thousands of jobs per second. One thread
    writes (the server's loop); the exporter's thread reads a snapshot.
    """

    __slots__ = ("cells",)

    def __init__(self) -> None:
        self.cells: dict[tuple[str, ...], list[Any]] = {}  # key -> [attrs, count]

    def cell(self, key: tuple[str, ...], attrs: Callable[[], Attrs]) -> list[Any]:
        found = self.cells.get(key)
        if found is None:
            found = self.cells[key] = [attrs(), 0]
        return found

    def snapshot(self) -> list[tuple[Attrs, int]]:
        return [(attrs, count) for attrs, count in list(self.cells.values())]


class TallySet:
    """One observable counter per Metric for a provider, summing every observer's Tally."""

    def __init__(self, meter: Meter, metric: Metric) -> None:
        self._tallies: list[Tally] = []
        observable(meter, metric, self._observe)

    def add(self, tally: Tally) -> None:
        self._tallies = [*self._tallies, tally]

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        merged: dict[frozenset[tuple[str, str]], tuple[Attrs, int]] = {}
        for tally in self._tallies:
            for attrs, count in tally.snapshot():
                key = frozenset(attrs.items())
                seen = merged.get(key)
                merged[key] = (attrs, count + (seen[1] if seen else 0))
        return [Observation(count, attrs) for attrs, count in merged.values()]


def tally(provider: Any, meter: Meter, metric: Metric) -> Tally:
    """A new Tally of ``metric``, exported with the others of ``provider``."""
    assert metric.type == "counter", metric
    new = Tally()
    shared(provider, metric.name, lambda: TallySet(meter, metric)).add(new)
    return new
