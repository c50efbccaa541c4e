"""The series limit per instrument: what kilnotel's providers give their readers, and
what each provider was made with.

Owns the ``cardinality_limit`` setting of ``prometheus_provider()`` and
``otlp_providers()``: checked once, handed to every reader that accepts
``cardinality_limits`` (SDK releases before that setting have no limit to raise), and
remembered per provider, so that ``observe()`` seeds within half of it and kilnotel's own
histograms fold past the same number the SDK does. Never spells a metric name.
"""

from __future__ import annotations

import inspect
import weakref
from typing import Any

from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)

from kilnotel import _names as n

_INSTRUMENTS = (Counter, Histogram, ObservableCounter, ObservableGauge,
                ObservableUpDownCounter, UpDownCounter)
_LIMITS: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def checked(limit: int) -> int:
    """``limit``, or ValueError naming the setting."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 12:
        raise ValueError(f"cardinality_limit must be a whole number of series of at least 12 "
                         f"(two seeded queue x kind pairs), got {limit!r}")
    return limit


def reader_options(reader: type[Any], limit: int) -> dict[str, Any]:
    """The keyword arguments that give a reader of class ``reader`` ``limit`` series per
    instrument, or none where the SDK has no such setting (it then folds nothing)."""
    try:
        parameters = inspect.signature(reader).parameters
    except (TypeError, ValueError):
        return {}
    if "cardinality_limits" not in parameters:
        return {}
    return {"cardinality_limits": dict.fromkeys(_INSTRUMENTS, limit)}


def remember(provider: Any, limit: int) -> None:
    _LIMITS[provider] = limit


def limit_of(provider: Any) -> int:
    """The limit ``provider`` was made with, the SDK's default for any other."""
    return _LIMITS.get(provider, n.CARDINALITY_LIMIT)
