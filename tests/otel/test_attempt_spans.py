"""Attempt spans made without the SDK's Span (kilnotel/_attempt_spans.py) export exactly
what the SDK's own spans export: every attempt below runs through kilnotel's tracing
twice, once the cheap way and once the SDK's way (forced by a span processor of one's
own), and the exported spans are compared field by field."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import (
    ConcurrentMultiSpanProcessor,
    ReadableSpan,
    SpanLimits,
    SpanProcessor,
    TracerProvider,
)
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased

import kiln
import kiln.events
from kiln._model._job import JobRow, JobState
from kiln._server._handle import Job
from kilnotel import TraceContextFilter
from kilnotel._attempt_spans import AttemptSpan, SpanFactory
from kilnotel._tracing import Tracing

PRODUCER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
Handler = Callable[[], Awaitable[Any]]


class Plain(SpanProcessor):
    """A processor of one's own: kilnotel cannot know what its on_start does."""


def _row(job_id: int, *, attempt: int = 1, rescues: int = 0, traced: bool = False) -> JobRow:
    now = dt.datetime.now(dt.UTC)
    return JobRow(
        id=job_id, queue="default", kind="noop", state=JobState.RUNNING, args={}, params={},
        metadata={"traceparent": PRODUCER} if traced else {}, priority=0, run_at=now,
        attempt=attempt, max_attempts=3, timeout=None, backoff=None, errors=[],
        created_at=now, admitted_at=None, attempted_at=now, finished_at=None,
        server_id="s", rate_key=None, rescues=rescues,
    )


async def _writer(row: JobRow, name: str, value: Any) -> bool:
    return True


def _handler_touches_its_span(tracer: trace.Tracer, logged: list[logging.LogRecord]
                              ) -> Handler:
    async def handler() -> None:
        span = trace.get_current_span()
        span.set_attribute("app.order", 42)
        span.add_event("app.checkpoint", {"step": 1})
        with tracer.start_as_current_span("inside"):
            pass
        _log(logged)

    return handler


def _log(logged: list[logging.LogRecord]) -> None:
    """A log line inside the handler, through kilnotel's filter; with the current span."""
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "hello", None, None)
    TraceContextFilter().filter(record)
    current = trace.get_current_span()
    record.current = (current.is_recording(), int(current.get_span_context().trace_flags))
    logged.append(record)


def _child_only(tracer: trace.Tracer, logged: list[logging.LogRecord]) -> Handler:
    async def handler() -> None:
        with tracer.start_as_current_span("child of the attempt"):
            pass
        _log(logged)

    return handler


async def _nothing() -> None:
    return None


def _attempts(tracer: trace.Tracer, logged: list[logging.LogRecord]
              ) -> list[tuple[JobRow, Handler, kiln.Outcome, BaseException | None, float | None]]:
    boom = RuntimeError("boom")
    return [
        (_row(1), _nothing, kiln.Outcome.COMPLETED, None, None),
        (_row(2, traced=True), _nothing, kiln.Outcome.COMPLETED, None, None),
        (_row(3), _handler_touches_its_span(tracer, logged), kiln.Outcome.COMPLETED, None,
         None),
        (_row(4), _child_only(tracer, logged), kiln.Outcome.COMPLETED, None, None),
        (_row(5, traced=True), _nothing, kiln.Outcome.RETRY, boom, 0.5),
        (_row(6, attempt=3), _nothing, kiln.Outcome.FAILED, ValueError("doomed"), None),
        (_row(7), _nothing, kiln.Outcome.SNOOZED, None, None),
        (_row(8, rescues=2), _nothing, kiln.Outcome.COMPLETED, None, None),
        (_row(9), _nothing, kiln.Outcome.CANCELLED, None, None),
        (_row(10), _nothing, kiln.Outcome.HANDED_BACK, None, None),
    ]


async def _run(cheap: bool, trace_parent: str, provider_args: dict[str, Any] | None = None
               ) -> tuple[tuple[ReadableSpan, ...], list[logging.LogRecord], Tracing]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(**(provider_args or {}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    if not cheap:
        provider.add_span_processor(Plain())
    tracing = Tracing(provider.get_tracer("kiln"), trace_parent)  # type: ignore[arg-type]
    logged: list[logging.LogRecord] = []
    loop = asyncio.get_running_loop()
    for row, handler, outcome, error, retry_in in _attempts(provider.get_tracer("app"), logged):
        try:
            await tracing.middleware(Job(row, _writer, loop), handler)
        finally:
            tracing._finish(kiln.events.JobFinished(job=row, outcome=outcome, duration=0.01,
                                             error=error, retry_in=retry_in))
    await tracing.middleware(Job(_row(11), _writer, loop), _nothing)
    tracing._fenced(kiln.events.Fenced(server_id="s", reason="lease lost"))
    provider.shutdown()
    return exporter.get_finished_spans(), logged, tracing


def _shape(spans: tuple[ReadableSpan, ...]) -> list[dict[str, Any]]:
    """Everything exported but the random ids and the clock, with parents and links as
    positions in the export (or the producer's fixed context)."""
    ids = {s.context.span_id: i for i, s in enumerate(spans) if s.context is not None}
    out = []
    for span in spans:
        assert span.context is not None and span.start_time and span.end_time
        assert span.start_time <= span.end_time
        parent = span.parent
        out.append({
            "name": span.name, "kind": span.kind,
            "attributes": dict(span.attributes or {}),
            "attribute types": sorted(type(v).__name__ for v in (span.attributes or {}).values()),
            "dropped": (span.dropped_attributes, span.dropped_events, span.dropped_links),
            "events": [(e.name, dict(e.attributes or {}), type(e.attributes).__name__)
                       for e in span.events],
            "links": [(f"{lk.context.trace_id:032x}", f"{lk.context.span_id:016x}",
                       lk.context.is_remote, dict(lk.attributes or {}),
                       type(lk.attributes).__name__, lk.dropped_attributes)
                      for lk in span.links],
            "parent": None if parent is None else ids.get(parent.span_id, (
                f"{parent.trace_id:032x}", f"{parent.span_id:016x}", parent.is_remote)),
            "same trace as parent": parent is None or parent.trace_id == span.context.trace_id,
            "flags": int(span.context.trace_flags), "remote": span.context.is_remote,
            "trace state": span.context.trace_state.to_header(),
            "status": (span.status.status_code, span.status.description),
            "resource": dict(span.resource.attributes),
            "scope": span.instrumentation_scope,
            "json keys": sorted(__import__("json").loads(span.to_json())),
        })
    return out


@pytest.mark.parametrize("trace_parent", ["link", "parent"])
async def test_cheap_attempt_spans_export_what_the_sdk_exports(trace_parent: str) -> None:
    cheap, cheap_logs, cheap_tracing = await _run(True, trace_parent)
    sdk, sdk_logs, sdk_tracing = await _run(False, trace_parent)
    assert cheap_tracing._factory.usable() and not sdk_tracing._factory.usable()
    assert len(cheap) == 13  # 11 attempts and the two spans the handlers made
    assert _shape(cheap) == _shape(sdk)
    for spans, logs in ((cheap, cheap_logs), (sdk, sdk_logs)):
        # log lines inside a handler carry the ids of the attempt's span
        by_id = {int(str(dict(s.attributes or {}).get("messaging.message.id", 0))): s
                 for s in spans if s.kind is trace.SpanKind.CONSUMER}
        for job_id, record in zip((3, 4), logs, strict=True):
            context = by_id[job_id].context
            assert context is not None
            assert record.span_id == f"{context.span_id:016x}"  # type: ignore[attr-defined]
            assert record.trace_id == f"{context.trace_id:032x}"  # type: ignore[attr-defined]
            assert record.current == (True, int(context.trace_flags))  # type: ignore[attr-defined]


async def test_an_untouched_completed_attempt_never_becomes_an_sdk_span() -> None:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider.get_tracer("kiln"), "link")
    row = _row(1)
    seen: list[Any] = []

    async def handler() -> None:
        seen.append(trace.get_current_span())

    await tracing.middleware(Job(row, _writer, asyncio.get_running_loop()), handler)
    (span,) = seen
    assert type(span) is AttemptSpan and span.is_recording()
    tracing._finish(kiln.events.JobFinished(job=row, outcome=kiln.Outcome.COMPLETED, duration=0.0))
    assert span.sdk() is None and not span.is_recording()
    span.set_attribute("late", 1)  # a stuck handler after the end: ignored, as the SDK does
    (exported,) = exporter.get_finished_spans()
    assert "late" not in (exported.attributes or {})
    assert dict(exported.attributes or {})["kiln.job.outcome"] == "completed"


async def test_unsampled_attempts_are_non_recording_with_the_sdks_flags() -> None:
    seen = []
    for cheap in (True, False):
        spans, logs, tracing = await _run(
            cheap, "link", {"sampler": ParentBased(ALWAYS_OFF)})
        assert [s.name for s in spans] == []
        assert tracing._open == {}
        seen.append([r.current for r in logs])  # type: ignore[attr-defined]
    assert seen[0] == seen[1] == [(False, 0x02), (False, 0x02)]  # random id, unsampled
    spans, _logs, tracing = await _run(True, "link", {"sampler": TraceIdRatioBased(0.5)})
    assert tracing._factory.usable()
    assert all(s.context is not None and s.context.trace_flags.sampled for s in spans)


def test_the_cheap_way_is_taken_only_where_nothing_can_tell() -> None:
    def usable(provider: TracerProvider) -> bool:
        return SpanFactory(provider.get_tracer("t")).usable()

    assert usable(TracerProvider())
    batch = TracerProvider()
    batch.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    assert usable(batch)
    batch.shutdown()
    own = TracerProvider()
    own.add_span_processor(Plain())
    assert not usable(own)
    concurrent = TracerProvider(active_span_processor=ConcurrentMultiSpanProcessor())
    assert not usable(concurrent)
    assert not usable(TracerProvider(span_limits=SpanLimits(max_span_attribute_length=8)))
    assert not SpanFactory(trace.NoOpTracerProvider().get_tracer("t")).usable()
    # a processor added after observe() is seen at the next attempt
    later = TracerProvider()
    factory = SpanFactory(later.get_tracer("t"))
    assert factory.usable()
    later.add_span_processor(Plain())
    assert not factory.usable()
