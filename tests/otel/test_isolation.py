"""Observability never breaks job processing: slow or failing subscribers, broken tracers."""

from __future__ import annotations

import asyncio
import logging

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

import kiln
import kiln.events
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, count, fast_config
from tests.support.waits import wait_for


async def test_failing_and_slow_subscribers_do_not_stop_jobs(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    hub = kiln.events.EventHub(queue_size=3)
    server = app.server({"default": 4}, fast_config(), events=hub)
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    seen: list[kiln.events.Event] = []

    def broken(event: kiln.events.Event) -> None:
        raise RuntimeError("a subscriber with a bug")

    async def slow(event: kiln.events.Event) -> None:
        seen.append(event)
        await asyncio.sleep(5)

    hub.subscribe(broken)
    hub.subscribe(slow, queued=True)
    running = Running(server)
    await running.started()
    with caplog.at_level(logging.ERROR, logger="kiln.events"):
        ids = [await client.enqueue("ok", {"i": i}) for i in range(40)]

        async def completed() -> bool:
            return await count(client, "completed", ids) == 40

        await wait_for(completed, 30, "every job completed")
    assert telemetry.value(n.JOBS_FINISHED.name, outcome="completed") == 40
    assert hub.errors >= 40 and hub.dropped > 0
    assert len(seen) <= 2  # the slow subscriber saw one or two events, then fell behind
    assert telemetry.value(n.EVENTS_DROPPED.name) == hub.dropped
    assert any("a subscriber with a bug" in r.getMessage() or r.exc_info for r in caplog.records)
    await running.stop()


class Exploding(SpanProcessor):
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if span.name.startswith(("process", "send")):
            raise RuntimeError("span processor on_start exploded")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("span processor on_end exploded")


async def test_a_broken_tracer_neither_fails_enqueues_nor_jobs(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    telemetry.tracer_provider.add_span_processor(Exploding())
    server = app.server({"default": 2}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    kilnotel.observe_client(client, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    await running.started()
    ids = [await client.enqueue("ok", {}) for _ in range(5)]

    async def completed() -> bool:
        return await count(client, "completed", ids) == 5

    await wait_for(completed, 20, "jobs completed despite the broken tracer")
    await running.stop()
    assert telemetry.value(n.JOBS_FINISHED.name, outcome="completed") == 5
    rows = [await client.get(i) for i in ids]
    assert all(r is not None and r.attempt == 1 for r in rows)
