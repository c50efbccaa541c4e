"""The process span's attributes written after sampling (kilnotel/_span_attributes.py):
only where no sampler or limit could tell the difference."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, NoOpTracerProvider, SpanKind
from opentelemetry.util.types import Attributes

import kiln
import kilnotel
from kilnotel._span_attributes import attributes_after_sampling
from tests.support.otel import Running, count, fast_config
from tests.support.waits import wait_for


class KindSampler(Sampler):
    """Samples the attempts of one kind only: it needs the attributes at sampling time."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str,
                      kind: SpanKind | None = None, attributes: Attributes = None,
                      links: Sequence[Link] | None = None, trace_state: Any = None
                      ) -> SamplingResult:
        self.seen.append(dict(attributes or {}))
        wanted = (attributes or {}).get("kiln.job.kind") == "ok"
        return SamplingResult(Decision.RECORD_AND_SAMPLE if wanted else Decision.DROP,
                              attributes)

    def get_description(self) -> str:
        return "KindSampler"


def test_only_the_sdks_own_samplers_and_no_limits_take_the_short_way() -> None:
    assert attributes_after_sampling(TracerProvider().get_tracer("t"))
    assert attributes_after_sampling(
        TracerProvider(sampler=ParentBased(TraceIdRatioBased(0.1))).get_tracer("t"))
    assert attributes_after_sampling(TracerProvider(sampler=ALWAYS_ON).get_tracer("t"))
    assert not attributes_after_sampling(TracerProvider(sampler=KindSampler()).get_tracer("t"))
    assert not attributes_after_sampling(
        TracerProvider(sampler=ParentBased(KindSampler())).get_tracer("t"))
    assert not attributes_after_sampling(TracerProvider(
        span_limits=SpanLimits(max_span_attribute_length=4)).get_tracer("t"))
    assert not attributes_after_sampling(TracerProvider(
        span_limits=SpanLimits(max_span_attributes=3)).get_tracer("t"))
    assert not attributes_after_sampling(NoOpTracerProvider().get_tracer("t"))


async def test_a_sampler_of_your_own_still_sees_every_attribute(
    app: kiln.App, client: kiln.Client
) -> None:
    sampler, exporter = KindSampler(), InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = app.server({"default": 2}, fast_config())
    kilnotel.observe(server, tracer_provider=provider)
    running = Running(server)
    await running.started()
    ids = [await client.enqueue("ok", {}), await client.enqueue("sync_ok", {})]
    await wait_for(lambda: _completed(client, ids), 20, "jobs completed")
    await running.stop()
    assert sorted(a["kiln.job.kind"] for a in sampler.seen) == ["ok", "sync_ok"]
    assert all(a["messaging.message.id"] in {str(i) for i in ids} for a in sampler.seen)
    (span,) = exporter.get_finished_spans()
    assert dict(span.attributes or {})["kiln.job.kind"] == "ok"
    assert dict(span.attributes or {})["kiln.job.outcome"] == "completed"
    provider.shutdown()


async def test_value_length_limits_still_apply(app: kiln.App, client: kiln.Client) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=3))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = app.server({"default": 1}, fast_config())
    kilnotel.observe(server, tracer_provider=provider)
    running = Running(server)
    await running.started()
    job = await client.enqueue("sync_ok", {})
    await wait_for(lambda: _completed(client, [job]), 20, "job completed")
    await running.stop()
    (span,) = exporter.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["kiln.job.kind"] == "syn" and attrs["kiln.job.outcome"] == "com"
    provider.shutdown()


async def _completed(client: kiln.Client, ids: Sequence[int]) -> bool:
    return await count(client, "completed", ids) == len(ids)
