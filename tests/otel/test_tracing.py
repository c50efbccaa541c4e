"""Spans: one producer span per enqueue, one consumer span per attempt, tied together."""

from __future__ import annotations

import functools

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import kiln
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, count, fast_config
from tests.support.waits import wait_for


async def _run_flaky(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry, trace_parent: str
) -> tuple[int, ReadableSpan, list[ReadableSpan]]:
    server = app.server({"default": 2}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider,
                     trace_parent=trace_parent)  # type: ignore[arg-type]
    kilnotel.observe_client(client, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    await running.started()
    job_id = await client.enqueue("flaky", {})
    await wait_for(lambda: _done(client, job_id), 20, "flaky job completed")
    await running.stop()
    spans = telemetry.spans()
    (send,) = [s for s in spans if s.kind is SpanKind.PRODUCER]
    process = sorted((s for s in spans if s.kind is SpanKind.CONSUMER),
                     key=lambda s: int(str(_attrs(s)["kiln.job.attempt"])))
    return job_id, send, process


async def _done(client: kiln.Client, job_id: int) -> bool:
    return await count(client, "completed", [job_id]) == 1


def _attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


async def test_one_trace_links_the_enqueue_to_every_attempt(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    job_id, send, process = await _run_flaky(app, client, telemetry, "link")
    assert send.name == "send default"
    assert _attrs(send) == {
        "messaging.system": "kiln", "messaging.destination.name": "default",
        "messaging.operation.type": "send", "messaging.operation.name": "send",
        "kiln.job.kind": "flaky", "messaging.message.id": str(job_id),
    }
    row = await client.get(job_id)
    assert row is not None
    assert send.context is not None
    assert row.metadata["traceparent"] == (
        f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}"
        f"-{int(send.context.trace_flags):02x}"
    )
    assert [s.attributes["kiln.job.attempt"] for s in process if s.attributes] == [1, 2, 3]
    for span in process:
        assert span.name == "process default"
        assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
            (send.context.trace_id, send.context.span_id)
        ]
        assert span.parent is None  # links, not parents: each attempt is its own trace
        attrs = _attrs(span)
        assert attrs["messaging.system"] == "kiln"
        assert attrs["messaging.destination.name"] == "default"
        assert attrs["messaging.operation.type"] == "process"
        assert attrs["messaging.message.id"] == str(job_id)
        assert attrs["kiln.job.kind"] == "flaky"
    first, second, last = process
    for failed in (first, second):
        assert failed.status.status_code is StatusCode.ERROR
        assert "flaky failure" in (failed.status.description or "")
        assert [e.name for e in failed.events] == [n.EVENT_RETRY, "exception"]
        retry = failed.events[0]
        assert retry.attributes is not None and retry.attributes[n.SPAN_RETRY_IN] == 0.05
        exc = failed.events[1].attributes or {}
        assert exc["exception.type"] == "RuntimeError"
        assert _attrs(failed)[n.SPAN_OUTCOME] == "retry"
    assert last.status.status_code is StatusCode.UNSET and last.events == ()
    assert _attrs(last)[n.SPAN_OUTCOME] == "completed"


async def test_parent_mode_puts_every_attempt_in_the_producers_trace(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    _job_id, send, process = await _run_flaky(app, client, telemetry, "parent")
    assert len(process) == 3 and send.context is not None
    for span in process:
        assert span.context is not None and span.parent is not None
        assert span.context.trace_id == send.context.trace_id
        assert span.parent.span_id == send.context.span_id
        assert span.links == ()


async def test_failed_for_good_records_the_exception_and_handler_spans_nest(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("test")

    @app.job("traced")
    def traced(job: kiln.Job) -> None:  # a plain def: runs in a worker thread
        with tracer.start_as_current_span("inside the handler"):
            pass

    server = app.server({"default": 2}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    kilnotel.observe_client(client, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    await running.started()
    with tracer.start_as_current_span("web request") as request:
        doomed = await client.enqueue("doomed", {})
    traced_id = await client.enqueue("traced", {}, max_attempts=1)

    async def finished() -> bool:
        return (await count(client, "failed", [doomed]) == 1
                and await count(client, "completed", [traced_id]) == 1)

    await wait_for(finished, 20, "jobs finished")
    await running.stop()
    spans = telemetry.spans()
    sends = [s for s in spans if s.kind is SpanKind.PRODUCER]
    doomed_send = next(s for s in sends if _attrs(s)["messaging.message.id"] == str(doomed))
    assert doomed_send.parent is not None
    assert doomed_send.parent.span_id == request.get_span_context().span_id
    last = [s for s in spans if s.kind is SpanKind.CONSUMER
            and _attrs(s)["messaging.message.id"] == str(doomed)][-1]
    assert _attrs(last)[n.SPAN_OUTCOME] == "failed"
    assert last.status.status_code is StatusCode.ERROR
    assert [e.name for e in last.events] == ["exception"]
    assert (last.events[0].attributes or {})["exception.type"] == "ValueError"
    inner = next(s for s in spans if s.name == "inside the handler")
    outer = next(s for s in spans if s.kind is SpanKind.CONSUMER
                 and _attrs(s)["messaging.message.id"] == str(traced_id))
    assert inner.parent is not None and outer.context is not None
    assert inner.parent.span_id == outer.context.span_id


def test_trace_parent_is_checked() -> None:
    from opentelemetry.trace import NoOpTracer

    from kilnotel._tracing import Tracing

    with pytest.raises(ValueError, match="trace_parent"):
        Tracing(NoOpTracer(), "child")  # type: ignore[arg-type]


async def test_link_mode_attempts_are_roots_even_when_the_server_runs_in_a_span(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    """``server.run()`` started inside a span (a service's startup span, say) must not
    make every job its child, in one endless trace."""
    tracer = telemetry.tracer_provider.get_tracer("test")
    server = app.server({"default": 2}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    with tracer.start_as_current_span("service startup") as startup:
        running = Running(server)  # the task copies the current context
    await running.started()
    plain = await client.enqueue("ok", {})  # enqueued without tracing: no producer
    kilnotel.observe_client(client, telemetry.meter_provider, telemetry.tracer_provider)
    traced = await client.enqueue("ok", {})
    await wait_for(lambda: _done(client, plain), 20, "plain job completed")
    await wait_for(lambda: _done(client, traced), 20, "traced job completed")
    await running.stop()
    ambient = startup.get_span_context().trace_id
    process = [s for s in telemetry.spans() if s.kind is SpanKind.CONSUMER]
    assert len(process) == 2
    for span in process:
        assert span.parent is None, span.name
        assert span.context is not None and span.context.trace_id != ambient
    (linked,) = [s for s in process if _attrs(s)["messaging.message.id"] == str(traced)]
    assert len(linked.links) == 1


async def test_failed_attempts_carry_error_type(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    _job_id, _send, process = await _run_flaky(app, client, telemetry, "link")
    first, second, last = process
    assert _attrs(first)["error.type"] == _attrs(second)["error.type"] == "RuntimeError"
    assert "error.type" not in _attrs(last)


async def test_a_batch_insert_is_one_send_span_linked_from_every_job(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    server = app.server({"default": 2}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    kilnotel.observe_client(client, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    await running.started()
    ids = await client.enqueue_many([client.build("ok", {"i": i}) for i in range(3)])
    for job_id in ids:
        await wait_for(functools.partial(_done, client, job_id), 20, "batch completed")
    await running.stop()
    spans = telemetry.spans()
    (send,) = [s for s in spans if s.kind is SpanKind.PRODUCER]
    assert send.name == "send default" and send.context is not None
    attrs = _attrs(send)
    assert attrs["messaging.batch.message_count"] == 3
    assert attrs["messaging.destination.name"] == "default"
    assert list(attrs["kiln.job.ids"]) == [str(i) for i in ids]  # type: ignore[call-overload]
    assert "messaging.message.id" not in attrs
    process = [s for s in spans if s.kind is SpanKind.CONSUMER]
    assert sorted(str(_attrs(s)["messaging.message.id"]) for s in process) == sorted(
        map(str, ids))
    for span in process:
        assert [lk.context.span_id for lk in span.links] == [send.context.span_id]
    for job_id in ids:
        row = await client.get(job_id)
        assert row is not None and f"{send.context.span_id:016x}" in row.metadata["traceparent"]
