"""Cheaper attributes for the ``process`` span of every attempt.

The SDK copies a new span's attributes out of the sampling result, then cleans every
value into a BoundedAttributes (type checks, sequence copies, length limits): about
half of what ``Tracer.start_span`` costs for kiln's seven attributes. kiln's values are
already clean (short strings and ints), so when nothing can differ, SpanAttributes hands
the sampler no attributes and writes them straight into the new span's map:

- the tracer is the SDK's, and its sampler is made of the SDK's own samplers (AlwaysOn,
  AlwaysOff, TraceIdRatioBased, ParentBased of those), which never look at attributes;
  a sampler of your own still gets every attribute at sampling time;
- no attribute value-length limit is set (``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT``)
  and the count limit leaves room, so cleaning would change nothing;
- the span holds the attribute map this SDK version has (``_attributes._dict``, a
  dict); otherwise ``span.set_attributes`` is used, as for any other span.

The spans exported are the same either way (tests/otel/test_tracing.py compares them).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace import sampling
from opentelemetry.trace import Span

from kilnotel._sampling import ProducerSampler

_SAMPLING_MODULE = sampling.__name__
_PARENT_BASED_DELEGATES = ("_root", "_remote_parent_sampled", "_remote_parent_not_sampled",
                           "_local_parent_sampled", "_local_parent_not_sampled")
_ROOM = 16  # attributes kiln may put on a process span, with room to spare


def _sdk_sampler(sampler: Any) -> bool:
    if type(sampler) is ProducerSampler:  # kilnotel's own: adds no attributes either
        return True
    if type(sampler).__module__ != _SAMPLING_MODULE:
        return False
    if isinstance(sampler, sampling.ParentBased):
        return all(_sdk_sampler(getattr(sampler, name, None)) and
                   not isinstance(getattr(sampler, name, None), sampling.ParentBased)
                   for name in _PARENT_BASED_DELEGATES)
    return isinstance(sampler, sampling.StaticSampler | sampling.TraceIdRatioBased)


def attributes_after_sampling(tracer: Any) -> bool:
    """Whether ``tracer``'s spans may get kiln's attributes after the sampling decision."""
    if not isinstance(tracer, SdkTracer):
        return False
    limits = getattr(tracer, "_span_limits", None)
    if limits is None or getattr(limits, "max_span_attribute_length", 0) is not None:
        return False
    count = getattr(limits, "max_span_attributes", 0)
    return (count is None or count >= _ROOM) and _sdk_sampler(tracer.sampler)


class SpanAttributes:
    __slots__ = ("after_sampling",)

    def __init__(self, tracer: Any) -> None:
        self.after_sampling = attributes_after_sampling(tracer)

    def write(self, span: Span, attributes: dict[str, Any]) -> None:
        """Put ``attributes`` (clean str/int/float/bool values) on a recording span."""
        if self.after_sampling:
            target = getattr(getattr(span, "_attributes", None), "_dict", None)
            if type(target) is dict and len(target) + len(attributes) <= _ROOM:
                target.update(attributes)
                return
        span.set_attributes(attributes)
