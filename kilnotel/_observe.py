"""``observe(server)``, ``observe_app(app)``, ``observe_client(client)``: the wiring.

Owns what ties kiln's seams (event hubs, execution middleware, enqueue hooks) to
OpenTelemetry providers, and the Observer handle that undoes it. Providers default to
the global ones (``opentelemetry.metrics.get_meter_provider()`` and
``opentelemetry.trace.get_tracer_provider()``), so an application that configures
OpenTelemetry itself (OTLP through the standard OTEL_* environment variables, say)
needs no more than ``kilnotel.observe(server)``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Literal

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from kiln import App, Client, Server, __version__
from kiln.events import Event
from kilnotel import _names as n
from kilnotel._cardinality import checked, limit_of
from kilnotel._collector import HistogramCollector
from kilnotel._counts import FINISHED_TTL, CountsCache
from kilnotel._gauges import GaugeSet, ServerSource, gauge_set
from kilnotel._histograms import BucketHistogram, SdkHistogram
from kilnotel._instruments import shared
from kilnotel._metrics import EventMetrics, Handlers, HistogramFactory
from kilnotel._sizes import SizesCache
from kilnotel._tracing import TraceParent, Tracing

CountsFrom = Literal["leader", "all"]
_REGISTRIES: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_OBSERVED: weakref.WeakKeyDictionary[Server, Observer] = weakref.WeakKeyDictionary()


def remember_registry(provider: Any, registry: Any) -> None:
    """Record the Prometheus registry behind ``provider`` (see prometheus_provider())."""
    _REGISTRIES[provider] = registry


def observer_of(server: Server) -> Observer | None:
    return _OBSERVED.get(server)


class Observer:
    """What one observe call set up. ``close()`` detaches it (idempotent).

    Instruments cannot be removed from a meter: after close the counters stop moving
    and this server's gauges stop reporting.
    """

    def __init__(
        self,
        meter_provider: Any,
        undo: list[Callable[[], None]],
        counts: CountsCache | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.meter_provider = meter_provider
        self.registry = _REGISTRIES.get(meter_provider)  # a CollectorRegistry, or None
        self.counts = counts
        self.tracing = tracing
        self._undo = undo

    async def refresh_counts(self) -> None:
        """Read the state counts now, every state, on the server's loop (the cache
        otherwise refreshes itself every counts_ttl)."""
        if self.counts is not None:
            await self.counts.refresh(every=True)

    async def refresh_sizes(self) -> None:
        """Read the table sizes now, on the server's loop (otherwise every sizes_ttl)."""
        if self.counts is not None and self.counts.sizes is not None:
            await self.counts.sizes.refresh()

    def close(self) -> None:
        undo, self._undo = self._undo, []
        for fn in undo:
            fn()
        if self.tracing is not None:
            self.tracing.enabled = False


def _meter(provider: MeterProvider | None) -> tuple[Any, Any]:
    provider = provider or otel_metrics.get_meter_provider()
    return provider, provider.get_meter(n.INSTRUMENTATION_SCOPE, __version__)


def _tracing(provider: TracerProvider | None, trace_parent: TraceParent) -> Tracing:
    provider = provider or trace.get_tracer_provider()
    return Tracing(provider.get_tracer(n.INSTRUMENTATION_SCOPE, __version__), trace_parent)


def _histograms(provider: Any, meter: Any, limit: int = n.CARDINALITY_LIMIT) -> HistogramFactory:
    """kilnotel's own bucket counts, exposed on the registry, for a provider made by
    prometheus_provider() (whose only reader is that registry's); the SDK's histograms
    for any other provider, whose readers (OTLP, in-memory...) only the SDK can feed."""
    registry = _REGISTRIES.get(provider)
    if registry is None:
        return lambda metric: shared(
            provider, f"kilnotel.histogram:{metric.name}", lambda: SdkHistogram(meter, metric))
    collector = shared(provider, "kilnotel.histograms", lambda: HistogramCollector(
        registry, n.INSTRUMENTATION_SCOPE, __version__))

    def bucketed(metric: n.Metric) -> BucketHistogram:
        histogram = BucketHistogram(metric, limit)  # one per observer: one writing thread each
        collector.add(histogram)
        return histogram

    return bucketed


class _Subscriber:
    """One inline subscriber for several handler tables: one lookup per event. Its
    ``event_types`` tells the hub which events it takes, so a hub that filters never
    calls it (nor builds the event) for the others."""

    __slots__ = ("_handlers", "event_types")

    def __init__(self, tables: list[Handlers]) -> None:
        merged: Handlers = {}
        for table in tables:
            for kind, handler in table.items():
                first = merged.get(kind)
                merged[kind] = handler if first is None else _both(first, handler)
        self._handlers = merged
        self.event_types = frozenset(merged)

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)


def _both(first: Callable[[Any], None], then: Callable[[Any], None]) -> Callable[[Any], None]:
    def both(event: Any) -> None:
        try:
            first(event)
        finally:  # the hub logs and counts an error; the second handler still runs
            then(event)

    return both


def observe(
    server: Server,
    meter_provider: MeterProvider | None = None,
    tracer_provider: TracerProvider | None = None,
    *,
    counts_ttl: float = 5.0,
    counts_max_age: float | None = None,
    counts_from: CountsFrom = "leader",
    finished_counts_ttl: float = FINISHED_TTL,
    counts_timeout: float | None = None,
    sizes_ttl: float = 60.0,
    traces: bool = True,
    trace_parent: TraceParent = "link",
    cardinality_limit: int | None = None,
) -> Observer:
    """Metrics and spans for ``server``; call before ``server.run()``.

    Registers the jobs-by-state gauges (cached store counts, refreshed at most every
    ``counts_ttl`` seconds in the background, published only by the leader unless
    ``counts_from="all"``, and withdrawn when not refreshed for ``counts_max_age``,
    4 x ``counts_ttl`` by default), with the live states counted every refresh and the
    completed and cancelled ones every ``finished_counts_ttl`` (5 minutes), a refresh
    cancelled and counted as failed past ``counts_timeout`` (``counts_max_age`` by
    default), the table-size gauges (``store.table_sizes()``,
    read by the same publisher at most every ``sizes_ttl`` seconds), the server gauges,
    the counters and histograms fed by the server's events, and, with ``traces``, a
    ``process {queue}`` span around every attempt.

    ``cardinality_limit``: the series per instrument the provider's readers keep (default:
    what ``prometheus_provider()``/``otlp_providers()`` made it with, else the SDK's
    2,000). Zero series are seeded within half of it; kilnotel's own histograms fold
    past it, as the SDK does.
    """
    tracing = None
    if traces:  # first: a server already running refuses middleware, before any wiring
        tracing = _tracing(tracer_provider, trace_parent)
        server.use(tracing.middleware)
    provider, meter = _meter(meter_provider)
    limit = limit_of(provider) if cardinality_limit is None else checked(cardinality_limit)
    server_ref = weakref.ref(server)

    if counts_from not in ("leader", "all"):
        raise ValueError(f"counts_from must be 'leader' or 'all', got {counts_from!r}")

    def alive() -> bool:
        s = server_ref()
        return s is not None and s.state not in ("stopping", "stopped")

    def eligible() -> bool:
        s = server_ref()
        return counts_from == "all" or (s is not None and s.is_leader)

    sizes = SizesCache(server.client, sizes_ttl)
    counts = CountsCache(server.client, counts_ttl, server.queues, alive,
                         max_age=counts_max_age, eligible=eligible, sizes=sizes,
                         finished_ttl=finished_counts_ttl, timeout=counts_timeout,
                         dead_after=float(server.config.dead_after))
    source = ServerSource(server, counts)
    gauges: GaugeSet = gauge_set(provider, meter)
    gauges.add(source)
    metrics = EventMetrics(provider, meter, _histograms(provider, meter, limit), counts, source,
                           tracing.span_ids if tracing is not None else None)
    metrics.seed(server.queues, {name: k.queue for name, k in server.kinds.items()},
                 n.seed_budget(limit))
    tables = [metrics.handlers()] + ([tracing.handlers()] if tracing is not None else [])
    undo: list[Callable[[], None]] = [
        lambda: gauges.discard(source),
        server.events.subscribe(_Subscriber(tables)),
    ]
    observer = Observer(provider, undo, counts, tracing)
    _OBSERVED[server] = observer
    return observer


def observe_client(
    client: Client | App,
    meter_provider: MeterProvider | None = None,
    tracer_provider: TracerProvider | None = None,
    *,
    traces: bool = True,
) -> Observer:
    """Enqueue counters and ``send {queue}`` spans for a Client, or for every client of
    an App (``observe_app``). Observe an App or its clients, not both: counts double."""
    provider, meter = _meter(meter_provider)
    undo = [client.events.subscribe(_Subscriber([EventMetrics(
        provider, meter, _histograms(provider, meter, limit_of(provider))).handlers()]))]
    tracing = None
    if traces:
        tracing = _tracing(tracer_provider, "link")
        hooks = client.enqueue_hooks if isinstance(client, App) else None
        hook = tracing.hook()
        if hooks is not None:
            hooks.append(hook)
            undo.append(lambda: hooks.remove(hook) if hook in hooks else None)
        else:
            assert isinstance(client, Client)
            client.add_enqueue_hook(hook)
    return Observer(provider, undo, None, tracing)


def observe_app(
    app: App,
    meter_provider: MeterProvider | None = None,
    tracer_provider: TracerProvider | None = None,
    *,
    traces: bool = True,
) -> Observer:
    """``observe_client`` for every client the App hands out (sync and async)."""
    return observe_client(app, meter_provider, tracer_provider, traces=traces)
