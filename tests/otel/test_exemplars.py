"""Exemplars on the OpenMetrics exposition: a job's run time links to its attempt's
span, its claim latency to the trace of its enqueue."""

from __future__ import annotations

import re

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

import kiln
import kilnotel
from kilnotel._exemplars import producer_of
from tests.support.otel import Running, count, fast_config
from tests.support.waits import wait_for

EXEMPLAR = re.compile(r'^(\w+)_bucket\{(.*)\} \S+ # \{span_id="(\w+)",trace_id="(\w+)"\}', re.M)


async def test_duration_and_claim_latency_buckets_link_to_traces(
    app: kiln.App, client: kiln.Client
) -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider, registry = kilnotel.prometheus_provider()
    server = app.server({"default": 1}, fast_config())
    kilnotel.observe(server, provider, tracer_provider)
    kilnotel.observe_client(client, provider, tracer_provider)
    running = Running(server)
    await running.started()
    job_id = await client.enqueue("ok", {})
    await wait_for(lambda: _done(client, job_id), 20, "the job completed")
    await running.stop()
    spans = exporter.get_finished_spans()
    (send,) = [s for s in spans if s.kind is SpanKind.PRODUCER]
    (process,) = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert send.context is not None and process.context is not None

    text = openmetrics(registry).decode()  # type: ignore[no-untyped-call]
    found = {m.group(1): (m.group(4), m.group(3)) for m in EXEMPLAR.finditer(text)}
    assert found["kiln_job_duration_seconds"] == (
        f"{process.context.trace_id:032x}", f"{process.context.span_id:016x}")
    assert found["kiln_claim_latency_seconds"] == (
        f"{send.context.trace_id:032x}", f"{send.context.span_id:016x}")
    assert "# {" not in generate_latest(registry).decode()  # plain text: no exemplars
    provider.shutdown()
    tracer_provider.shutdown()


async def _done(client: kiln.Client, job_id: int) -> bool:
    return await count(client, "completed", [job_id]) == 1


def test_only_sampled_well_formed_producer_contexts_are_exemplars() -> None:
    def row(traceparent: object) -> kiln.JobRow:
        return _Row({"traceparent": traceparent})  # type: ignore[return-value]

    good = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    assert producer_of(row(good)) == ("a" * 32, "b" * 16)
    assert producer_of(row(good[:-2] + "00")) is None  # not sampled
    assert producer_of(row(good[:-2] + "zz")) is None
    assert producer_of(row("garbage")) is None
    assert producer_of(row(42)) is None


class _Row:
    def __init__(self, metadata: dict[str, object]) -> None:
        self.metadata = metadata


def test_span_ids_are_written_as_w3c_hex_at_scrape_time() -> None:
    """Spans' ids are kept as ints and written when /metrics is read: zero-padded to
    32 and 16 hex digits, as the producer's stored text (which is kept as it is)."""
    from prometheus_client import CollectorRegistry

    from kilnotel import _names as n
    from kilnotel._collector import HistogramCollector
    from kilnotel._histograms import BucketHistogram

    registry = CollectorRegistry()
    histogram = BucketHistogram(n.JOB_DURATION)
    HistogramCollector(registry, "kilnotel", "0").add(histogram)
    record = histogram.traced(("default", "k"), {"kiln.queue": "default", "kiln.kind": "k"})
    record(0.0001, 1, 0xAB)  # a span's ids: ints
    record(1e9, "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")  # stored text
    text = openmetrics(registry).decode()  # type: ignore[no-untyped-call]
    found = [(m.group(4), m.group(3)) for m in EXEMPLAR.finditer(text)]
    assert found == [("0" * 31 + "1", "0" * 14 + "ab"),
                     ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")]
