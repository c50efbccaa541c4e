"""What the kilnotel tests share: in-memory OpenTelemetry readers, a server running in
the test's event loop, fast settings and a count of jobs by state."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

import kiln
from tests.support import config
from tests.support.waits import wait_for

# the kilnotel servers shut down sooner than tests.support.config's
OTEL_OVERRIDES: dict[str, float | None] = {"shutdown_timeout": 0.3}
FAST = config.fast(**OTEL_OVERRIDES)


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


def fast_config(**overrides: float | None) -> kiln.ServerConfig:
    """The kilnotel tests' fast settings (``FAST`` of tests/otel/jobs.py) and ``overrides``."""
    return config.fast_config(**{**OTEL_OVERRIDES, **overrides})


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

        await wait_for(running, 10, "server running")

    async def stop(self) -> None:
        self.server.stop()
        async with asyncio.timeout(20):
            await self.task


async def count(client: kiln.Client, state: str, ids: Sequence[int] | None = None) -> int:
    return await client.count(kiln.filter_of(ids=ids or (), state=state))


def series(registry: CollectorRegistry, family: str) -> Iterator[tuple[dict[str, str], float]]:
    for line in generate_latest(registry).decode().splitlines():
        match = re.match(rf"^{family}(?:\{{([^}}]*)\}})? (\S+)$", line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
            assert labels["otel_scope_name"] == "kilnotel", line
            yield labels, float(match.group(2))


def value(registry: CollectorRegistry, family: str, **labels: str) -> float | None:
    found = [v for have, v in series(registry, family)
             if all(have.get(k) == w for k, w in labels.items())]
    assert len(found) <= 1, (family, labels, found)
    return found[0] if found else None


async def leads(server: kiln.Server) -> bool:
    return server.is_leader
