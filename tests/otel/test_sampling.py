"""kilnotel.ProducerSampler and the fast path's decisions: an attempt is traced when the
request that enqueued it was, the others at the ratio, decided from the ids alone; an
unsampled attempt builds no span attributes."""

from __future__ import annotations

from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, ParentBased
from opentelemetry.trace import Link, SpanContext, TraceFlags

import kilnotel
from kiln import JobRow
from kilnotel._tracing import Tracing
from tests.support.parts import row

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
UNSAMPLED = "00-1af7651916cd43dd8448eb211c80319c-c7ad6b7169203331-00"


def job(job_id: int, traceparent: str | None) -> JobRow:
    made = row(job_id)
    if traceparent is not None:
        made.metadata = {"traceparent": traceparent}
    return made


def tracing(ratio: float) -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(kilnotel.ProducerSampler(ratio)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider.get_tracer("t")), exporter


def test_attempts_follow_their_producer_then_the_ratio() -> None:
    t, _exporter = tracing(0.0)
    assert t._factory.usable()  # the fast path takes kilnotel's own sampler
    decided = [t._start(job(i, parent)).get_span_context().trace_flags.sampled
               for i, parent in enumerate((SAMPLED, UNSAMPLED, None), start=1)]
    assert decided == [True, False, False]
    everything, _ = tracing(1.0)
    assert all(everything._start(job(i, UNSAMPLED)).get_span_context().trace_flags.sampled
               for i in range(20))


def test_the_fast_path_decides_as_the_sampler_does() -> None:
    """Same ids, same decision: the fast path's bound is TraceIdRatioBased's."""
    sampler = kilnotel.ProducerSampler(0.3)
    t, _ = tracing(0.3)
    kept = 0
    for i in range(400):
        span = t._start(job(i, UNSAMPLED))
        context = span.get_span_context()
        result = sampler.should_sample(None, context.trace_id, "process q")
        assert context.trace_flags.sampled == (result.decision is Decision.RECORD_AND_SAMPLE)
        kept += context.trace_flags.sampled
    assert 60 < kept < 180  # about 30% of 400
    producer = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    linked = sampler.should_sample(None, 5, "process q", links=[Link(producer)])
    assert linked.decision is Decision.RECORD_AND_SAMPLE


def test_an_unsampled_attempt_builds_no_attributes() -> None:
    t, exporter = tracing(0.0)
    built: list[int] = []

    def attributes() -> dict[str, object]:
        built.append(1)
        return {}

    span = t._factory.start("process q", Context(), None, None, attributes)
    assert not span.is_recording() and built == []
    assert exporter.get_finished_spans() == ()
