"""Exemplars: which trace a histogram observation came from.

Owns how an observation finds its trace: the claim latency of a job links to the trace
of its enqueue (the W3C ``traceparent`` the producer stored in the job's metadata, read
with a split, no propagator), its run time to the attempt's own ``process`` span (asked
of the tracer, which still holds the span when the attempt's JobFinished arrives). Only
sampled contexts are exemplars. kilnotel's own bucket histograms (prometheus_provider())
keep one exemplar per bucket and expose it in the OpenMetrics exposition; SDK
histograms get none (the provider's exemplar filter is off: see _prometheus).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kiln import JobRow
from kilnotel._histograms import Histogram, Id, TracedRecorder

Ids = tuple[Id, Id]  # trace id, span id: ints from a span, hex text from metadata
ExemplarOf = Callable[[JobRow], Ids | None]


def producer_of(row: JobRow) -> Ids | None:
    """The sampled producer context stored with the job, if any."""
    metadata = row.metadata
    parent = metadata.get("traceparent") if metadata else None
    if not isinstance(parent, str):
        return None
    parts = parent.split("-")
    if len(parts) != 4 or len(parts[1]) != 32 or len(parts[2]) != 16 or len(parts[3]) != 2:
        return None
    try:
        sampled = int(parts[3], 16) & 1
    except ValueError:
        return None
    return (parts[1], parts[2]) if sampled else None


class Traced:
    """The traced recorders of one histogram, by attribute-set key; None for a histogram
    that keeps no exemplars (an SDK one)."""

    __slots__ = ("_histogram", "_recorders")

    def __init__(self, histogram: Histogram) -> None:
        self._histogram: Any = histogram if hasattr(histogram, "traced") else None
        self._recorders: dict[tuple[str, ...], TracedRecorder] = {}

    def __bool__(self) -> bool:
        return self._histogram is not None

    def recorder(self, key: tuple[str, ...], attrs: dict[str, str]) -> TracedRecorder:
        found = self._recorders.get(key)
        if found is None:
            found = self._recorders[key] = self._histogram.traced(key, attrs)
        return found
