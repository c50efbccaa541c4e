"""The ``process`` span of an attempt, made without the SDK's Span where nothing can tell.

An SDK span costs more CPU than kiln spends on a no-op job: ``Tracer.start_span`` builds
a ``Span`` (a lock, a ``BoundedAttributes`` with its own lock, bounded lists for events
and links), runs every processor's ``on_start``, and ``end`` copies it all into a
``ReadableSpan`` for the processors' ``on_end``. Most attempts complete and nobody ever
touches their span but kilnotel, so when the tracer allows it (see ``SpanFactory``),
an attempt gets an ``AttemptSpan``: the ids, start time, attributes and links in a few
slots, current while the handler runs (log lines and child spans see its context, as
they would an SDK span's). When the attempt completes untouched, kilnotel builds the
``ReadableSpan`` the SDK would have built and hands it to the span processors'
``on_end`` itself: the same name, context, parent, kind, attributes, links, status,
resource, scope and times.

As soon as anything else wants the span (the handler sets an attribute, adds an event
or a status; the attempt fails, retries, snoozes or was rescued), it becomes the SDK's
own ``Span``: started then, with the recorded start time, context and attributes, and
from then on every call is the SDK's. The processors' ``on_start`` then runs late, which
only kilnotel's rule for taking this way makes harmless: every processor is the SDK's
``BatchSpanProcessor`` or ``SimpleSpanProcessor``, whose ``on_start`` does nothing.

The way is taken only when all of these hold, checked again when processors change:

- the tracer is the SDK's, enabled, its internal metrics off, its span processor the
  SDK's synchronous multi-processor holding only Batch/Simple span processors;
- the sampler is made of the SDK's own samplers and no attribute value-length limit is
  set (``_span_attributes``: kiln's attributes go in as they are).

tests/otel/test_attempt_spans.py exports the same attempts both ways and compares them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from time import time_ns
from typing import Any

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, sampling
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import Decision
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util import types

from kilnotel._sampling import ProducerSampler
from kilnotel._span_attributes import attributes_after_sampling

log = logging.getLogger("kilnotel.tracing")

# the SDK's private pieces, imported where they are at the SDK releases kiln is tested
# with; an SDK that moved one leaves only the public path (SpanFactory is unusable)
_Span: Any = None
SynchronousMultiSpanProcessor: Any = None
NoOpTracerMetrics: Any = None
try:
    from opentelemetry.sdk import trace as _sdk_trace
    from opentelemetry.sdk.trace import _tracer_metrics

    _Span = _sdk_trace._Span
    SynchronousMultiSpanProcessor = _sdk_trace.SynchronousMultiSpanProcessor
    NoOpTracerMetrics = _tracer_metrics.NoOpTracerMetrics
except (ImportError, AttributeError):  # pragma: no cover - depends on the installed SDK
    log.debug("kilnotel: the SDK's span internals moved; attempts take the public path")

_QUIET_PROCESSORS = (BatchSpanProcessor, SimpleSpanProcessor)  # on_start does nothing
_FLAGS = {  # (sampled, random trace id) -> the flags the SDK gives the span
    (sampled, random): TraceFlags(
        (TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
        | (TraceFlags.RANDOM_TRACE_ID if random else 0))
    for sampled in (False, True) for random in (False, True)
}
_LOCK = threading.Lock()  # an attempt span becomes an SDK span once, in whichever thread


def _root_decision(sampler: Any) -> Decision | None:
    """The decision ``sampler`` makes for every root span when it is always the same
    (AlwaysOn, AlwaysOff, or ParentBased of them, the SDK's default): it then needs no
    call. Those samplers give a root span no attributes and no trace state."""
    if isinstance(sampler, sampling.ParentBased):
        sampler = getattr(sampler, "_root", None)
    if type(sampler) is sampling.StaticSampler:
        decision = getattr(sampler, "_decision", None)
        return decision if isinstance(decision, Decision) else None
    return None


_TRACE_ID_LIMIT = (1 << 64) - 1  # TraceIdRatioBased decides on the low 64 bits


def _root_ratio(sampler: Any) -> tuple[int, bool] | None:
    """(bound, follow the link) when ``sampler`` decides every root by its trace id at a
    ratio (TraceIdRatioBased), or also keeps a root whose producer link is sampled
    (kilnotel's ProducerSampler), bare or at the root of ParentBased: decided here then,
    from the ids, without a call. Those samplers give a root no attributes and no state."""
    if isinstance(sampler, sampling.ParentBased):
        sampler = getattr(sampler, "_root", None)
    if type(sampler) is ProducerSampler:
        return sampler.bound, True
    if type(sampler) is sampling.TraceIdRatioBased:
        return int(sampler.bound), False
    return None


def _quiet(processor: Any) -> bool:
    return type(processor) is SynchronousMultiSpanProcessor and all(
        type(p) in _QUIET_PROCESSORS for p in processor._span_processors)


class SpanFactory:
    """Makes the process spans of one tracer, the cheap way while ``usable()``."""

    __slots__ = ("_checked", "_links_attributes", "_ok", "_ratio", "_root", "tracer")

    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self._ok = (
            _Span is not None
            and isinstance(tracer, SdkTracer)
            and type(getattr(tracer, "_tracer_metrics", None)) is NoOpTracerMetrics
            and attributes_after_sampling(tracer)
        )
        self._checked: Any = None  # the processors tuple last found quiet
        self._root: tuple[bool, bool] | None = None  # (recording, sampled) of every root
        self._ratio: tuple[int, bool] | None = None  # (bound, follow the link) of roots
        if self._ok:
            limits = tracer._span_limits
            # what the SDK gives a link without attributes: an empty, immutable map
            self._links_attributes = BoundedAttributes(
                limits.max_link_attributes, None, immutable=True,
                max_value_len=limits.max_attribute_length)
            root: Any = _root_decision(tracer.sampler)  # Decision's methods are untyped
            if root is not None:
                self._root = (bool(root.is_recording()), bool(root.is_sampled()))
            self._ratio = _root_ratio(tracer.sampler)

    def usable(self) -> bool:
        if not self._ok:
            return False
        tracer = self.tracer
        processors = getattr(tracer.span_processor, "_span_processors", None)
        if processors is not self._checked:  # added to since last time: look again
            if not _quiet(tracer.span_processor):
                return False
            self._checked = processors
        return bool(tracer._is_enabled())

    def start(
        self, name: str, context: Context, parent: SpanContext | None,
        link: SpanContext | None, attributes: Callable[[], dict[str, Any]],
    ) -> AttemptSpan | NonRecordingSpan:
        """What ``Tracer.start_span(name, context, CONSUMER, attributes, links)`` makes,
        but an AttemptSpan where it would make an SDK span (attributes after sampling,
        built only for a recording span)."""
        tracer = self.tracer
        ids = tracer.id_generator
        if parent is None and self._ratio is not None:
            # a root decided by its trace id (and its producer's sampled flag): an
            # unsampled attempt costs two ids and a non-recording span, nothing more
            trace_id = ids.generate_trace_id()
            bound, follow = self._ratio
            sampled = ((follow and link is not None and link.trace_flags.sampled)
                       or (trace_id & _TRACE_ID_LIMIT) < bound)
            flags = _FLAGS[sampled, bool(ids.is_trace_id_random())]
            span_context = SpanContext(trace_id, ids.generate_span_id(), is_remote=False,
                                       trace_flags=flags)
            if not sampled:
                return NonRecordingSpan(span_context)
            links = (Link(link, self._links_attributes),) if link is not None else ()
            return AttemptSpan(self, name, span_context, parent, links, attributes(),
                               context)
        links = (Link(link, self._links_attributes),) if link is not None else ()
        if parent is None:
            trace_id = ids.generate_trace_id()
            random = ids.is_trace_id_random()
        else:
            trace_id = parent.trace_id
            random = parent.trace_flags.random_trace_id
        trace_state = None
        extra = None
        if parent is None and self._root is not None:
            # a root (kiln passes a context without a valid span), and a sampler that
            # decides every root alike: what its should_sample would return
            recording, sampled = self._root
        else:
            result = tracer.sampler.should_sample(context, trace_id, name, SpanKind.CONSUMER,
                                                  None, links)
            recording, sampled = result.decision.is_recording(), result.decision.is_sampled()
            trace_state = result.trace_state
            extra = result.attributes  # the SDK's samplers add none; kept if one ever does
        span_context = SpanContext(trace_id, ids.generate_span_id(), is_remote=False,
                                   trace_flags=_FLAGS[sampled, bool(random)],
                                   trace_state=trace_state)
        if not recording:
            return NonRecordingSpan(span_context)
        made = attributes()
        if extra:
            made = {**extra, **made}
        return AttemptSpan(self, name, span_context, parent, links, made, context)

    def sdk_span(self, span: AttemptSpan) -> SdkSpan:
        """The SDK span ``span`` would have been from its start."""
        tracer = self.tracer
        sdk: SdkSpan = _Span(
            name=span.name, context=span.context, parent=span.parent, sampler=tracer.sampler,
            resource=tracer.resource, attributes=span.attributes,
            span_processor=tracer.span_processor, kind=SpanKind.CONSUMER, links=span.links,
            instrumentation_info=tracer.instrumentation_info, limits=tracer._span_limits,
            instrumentation_scope=tracer._instrumentation_scope,
        )
        sdk.start(start_time=span.start_time, parent_context=span.parent_context)
        return sdk

    def end(self, span: AttemptSpan, end_time: int) -> None:
        """Hand the ended, untouched ``span`` to the processors as the SDK would."""
        tracer = self.tracer
        tracer.span_processor.on_end(ReadableSpan(
            name=span.name, context=span.context, parent=span.parent,
            resource=tracer.resource, attributes=span.attributes, links=span.links,
            kind=SpanKind.CONSUMER, instrumentation_info=tracer.instrumentation_info,
            start_time=span.start_time, end_time=end_time,
            instrumentation_scope=tracer._instrumentation_scope,
        ))


class AttemptSpan(trace.Span):
    """A recording span that is a few slots until something other than kilnotel's own
    ending needs it; then it is an SDK span (``sdk()``) and forwards every call to it."""

    __slots__ = ("_ended", "_factory", "_sdk", "attributes", "context", "links", "name",
                 "parent", "parent_context", "start_time")

    def __init__(
        self, factory: SpanFactory, name: str, context: SpanContext,
        parent: SpanContext | None, links: tuple[Link, ...], attributes: dict[str, Any],
        parent_context: Context,
    ) -> None:
        self._factory = factory
        self.name = name
        self.context = context
        self.parent = parent
        self.links = links
        self.attributes = attributes
        self.parent_context = parent_context
        self.start_time = time_ns()
        self._sdk: SdkSpan | None = None
        self._ended = False

    def sdk(self) -> SdkSpan | None:
        """The SDK span this one now is (made now if need be); None once ended cheaply."""
        sdk = self._sdk
        if sdk is not None:
            return sdk
        with _LOCK:
            if self._sdk is None and not self._ended:
                self._sdk = self._factory.sdk_span(self)
            return self._sdk

    def end_untouched(self, outcome_key: str, outcome: str) -> bool:
        """End here, without an SDK span, if nothing made one: True when done."""
        with _LOCK:
            if self._sdk is not None or self._ended:
                return False
            self._ended = True
        self.attributes[outcome_key] = outcome
        self._factory.end(self, time_ns())
        return True

    def _late(self, what: str) -> None:
        log.warning("kilnotel: %s on the ended span of an attempt (ignored)", what)

    # opentelemetry.trace.Span ----------------------------------------------------------
    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        sdk = self._sdk
        return sdk.is_recording() if sdk is not None else not self._ended

    def end(self, end_time: int | None = None) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("end")
        sdk.end(end_time)

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("set_attributes")
        sdk.set_attributes(attributes)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("set_attribute")
        sdk.set_attribute(key, value)

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("add_event")
        sdk.add_event(name, attributes, timestamp)

    def add_link(self, context: SpanContext, attributes: types.Attributes = None) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("add_link")
        sdk.add_link(context, attributes)

    def update_name(self, name: str) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("update_name")
        sdk.update_name(name)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("set_status")
        sdk.set_status(status, description)

    def record_exception(
        self, exception: BaseException, attributes: types.Attributes = None,
        timestamp: int | None = None, escaped: bool = False,
    ) -> None:
        sdk = self.sdk()
        if sdk is None:
            return self._late("record_exception")
        sdk.record_exception(exception, attributes, timestamp, escaped)
