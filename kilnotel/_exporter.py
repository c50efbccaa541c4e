"""``QueueExporter``: the queue state of one kiln database, published by a process that
runs no worker (``kiln exporter``).

Owns the exporter's refresh loop and the reads it makes besides the counts. Every
``counts_ttl`` it reads, by queue: the jobs by state (the live states each time, every
state every ``finished_counts_ttl``, as a publishing worker does: ``_counts``), the
oldest available job's age, the scheduled jobs that fell due, the live servers that
serve the queue (registered, heartbeat younger than ``stale_after``, by the database
clock) and whether the queue is paused; plus the kind conflicts, the concurrency in use
and, every ``sizes_ttl``, the table sizes. It publishes them under the same names the
leader uses (``kiln_jobs_available``, ...) and ``kiln_queue_scheduled_due`` and
``kiln_queue_servers`` of its own, all zero-filled for every known queue (the ones it
was told, and every one seen in jobs, servers or pauses), with ``kiln_build_info``
carrying the installation id.

So the numbers exist when no worker runs (scaled to zero, all crashed, none scraped):
the alert "work is waiting and no live server serves it" and an autoscaler both read
them. A failed or hung read is counted in ``kiln_counts_refresh_failures_total``; past
``counts_max_age`` without a good one, the numbers are withdrawn, as a worker's are.
One small process per installation is enough; two are harmless (rules take ``max``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Iterable
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import MeterProvider

from kiln import Client, __version__
from kilnotel import _names as n
from kilnotel._counts import FINISHED_TTL, CountsCache
from kilnotel._gauges import QueueState, Source, gauge_set
from kilnotel._installation import Installation
from kilnotel._sizes import SizesCache

log = logging.getLogger("kilnotel.exporter")
STALE_AFTER = 30.0  # seconds without a heartbeat before a server no longer counts as live


class QueueExporter:
    """Reads one installation's queue state every ``counts_ttl`` and publishes it on
    ``meter_provider`` (the global one by default; ``prometheus_provider()``'s for
    /metrics). ``await run(stop)`` until ``stop`` is set; ``close()`` withdraws it."""

    def __init__(
        self,
        client: Client,
        meter_provider: MeterProvider | None = None,
        *,
        queues: Iterable[str] = (),
        counts_ttl: float = 5.0,
        counts_max_age: float | None = None,
        finished_counts_ttl: float = FINISHED_TTL,
        counts_timeout: float | None = None,
        sizes_ttl: float = 60.0,
        stale_after: float = STALE_AFTER,
    ) -> None:
        if not stale_after > 0:
            raise ValueError(f"stale_after must be positive, got {stale_after!r}")
        provider: Any = meter_provider or otel_metrics.get_meter_provider()
        meter = provider.get_meter(n.INSTRUMENTATION_SCOPE, __version__)
        self._client = client
        self._closed = False
        self.stale_after = stale_after
        self.counts = CountsCache(
            client, counts_ttl, queues, lambda: not self._closed, max_age=counts_max_age,
            sizes=SizesCache(client, sizes_ttl), finished_ttl=finished_counts_ttl,
            timeout=counts_timeout)
        self.queues = QueueState()
        self.installation = Installation(client)
        self._source = Source(self.counts, self.installation, self.queues)
        self._gauges = gauge_set(provider, meter)
        self._gauges.add(self._source)

    async def refresh(self) -> None:
        """One pass over the database (raises what a read raised)."""
        counts = self.counts
        await self.installation.read()
        servers = await self._client.servers()
        controls = await self._client.queue_controls()
        due = await self._client.scheduled_due()
        serving: dict[str, int] = {}
        for server in servers:
            age = server.heartbeat_age
            if age is not None and age <= self.stale_after:
                for queue in server.queues:
                    serving[queue] = serving.get(queue, 0) + 1
        for queue in (*(q for s in servers for q in s.queues), *due,
                      *(p.queue for p in controls.pauses if p.queue != "*")):
            counts.add_queue(queue)
        await counts.refresh()  # last: it stamps the time the numbers are fresh from
        known = counts.known
        self.queues.scheduled_due = {q: due.get(q, 0) for q in known}
        self.queues.servers = {q: serving.get(q, 0) for q in known}
        self.queues.paused = {q: int(controls.paused(q)) for q in known}

    async def refresh_once(self) -> bool:
        """``refresh()`` within ``counts_timeout``; a failure is counted and logged."""
        try:
            async with asyncio.timeout(self.counts.timeout):
                await self.refresh()
            return True
        except TimeoutError:
            self.counts.errors += 1
            self.counts.timeouts += 1
            log.warning("kiln exporter: reading the queue state took more than %gs: "
                        "cancelled", self.counts.timeout)
        except Exception as exc:
            self.counts.errors += 1
            log.warning("kiln exporter: reading the queue state failed: %s", exc)
        return False

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh every ``counts_ttl`` (with a little jitter) until ``stop`` is set."""
        ttl = self.counts.ttl
        while not stop.is_set():
            began = time.monotonic()
            await self.refresh_once()
            pause = max(0.0, ttl * random.uniform(0.9, 1.1) - (time.monotonic() - began))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(pause):
                    await stop.wait()

    def close(self) -> None:
        """Withdraw everything this exporter publishes (idempotent)."""
        self._closed = True
        self._gauges.discard(self._source)
