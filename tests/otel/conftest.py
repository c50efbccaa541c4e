"""Fixtures for kilnotel: in-memory OpenTelemetry readers, and a real server to observe."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import kiln
from kiln.stores import Store, store_from_url
from tests.otel.jobs import FAST, make_app


class Telemetry:
    """An SDK meter provider and tracer provider that keep everything in memory."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def points(self, name: str) -> list[Any]:
        """Every data point of instrument ``name`` in one fresh collection."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def collect(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out

    def value(self, name: str, **attrs: str) -> float:
        """The sum of the points of ``name`` whose attributes include ``attrs``."""
        total = 0.0
        for p in self.points(name):
            if _matches(p, attrs):
                assert isinstance(p, NumberDataPoint), p
                total += p.value
        return total

    def histogram(self, name: str, **attrs: str) -> HistogramDataPoint:
        matching = [p for p in self.points(name) if _matches(p, attrs)]
        assert len(matching) == 1, (name, attrs, matching)
        point = matching[0]
        assert isinstance(point, HistogramDataPoint)
        return point

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def shutdown(self) -> None:
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()


def _matches(point: Any, attrs: dict[str, str]) -> bool:
    # attribute keys with dots are passed as keyword arguments with underscores
    have = {k.replace(".", "_"): v for k, v in (point.attributes or {}).items()}
    return all(have.get(k) == v for k, v in attrs.items())


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    t.shutdown()


@pytest.fixture
async def client(store_url: str, app: kiln.App) -> AsyncIterator[kiln.Client]:
    """A client of ``app``'s kinds on its own open, migrated store (the test's side)."""
    store: Store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    try:
        yield kiln.Client(store, app.kinds)
    finally:
        await store.close()


@pytest.fixture
def app(store_url: str) -> kiln.App:
    return make_app(store_url)


def fast_config(**overrides: float) -> kiln.ServerConfig:
    return kiln.ServerConfig(**{**FAST, **overrides})  # type: ignore[arg-type]


async def wait_until(
    condition: Callable[[], Awaitable[bool]], timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


class Running:
    """A server running as a task of the test's event loop."""

    def __init__(self, server: kiln.Server) -> None:
        self.server = server
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(server.run())

    async def started(self) -> None:
        async def running() -> bool:
            if self.task.done():
                self.task.result()
            return bool(self.server.stats().state == "running")

        await wait_until(running, 10, "server running")

    async def stop(self) -> None:
        self.server.stop()
        async with asyncio.timeout(20):
            await self.task


async def count(client: kiln.Client, state: str, ids: Sequence[int] | None = None) -> int:
    return await client.count(kiln.filter_of(ids=ids or (), state=state))
