"""The Prometheus side: a MeterProvider on a registry of its own, and /metrics over HTTP.

Owns the PrometheusMetricReader wiring and the HTTP server. Never touches
prometheus_client's global REGISTRY: two readers on one registry expose duplicate
families, so every provider gets its own CollectorRegistry.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any
from wsgiref.simple_server import WSGIServer

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from prometheus_client import CollectorRegistry, start_http_server

from kiln import Server
from kilnotel import _names as n
from kilnotel._cardinality import checked, reader_options, remember
from kilnotel._observe import Observer, observe, observer_of, remember_registry

DEFAULT_PORT = 9464  # the OpenTelemetry Prometheus exporter's conventional port
DEFAULT_SERVICE_NAME = "kiln-worker"


def default_resource() -> Resource:
    """``Resource.create()`` (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES), with
    ``service.name`` ``kiln-worker`` rather than the SDK's ``unknown_service:python``."""
    resource = Resource.create()
    name = str(resource.attributes.get(SERVICE_NAME, ""))
    if not name or name.startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    return resource


def prometheus_provider(
    registry: CollectorRegistry | None = None, *, resource: Resource | None = None,
    cardinality_limit: int = n.CARDINALITY_LIMIT,
) -> tuple[MeterProvider, CollectorRegistry]:
    """A MeterProvider whose metrics are read into ``registry`` (a new one by default).

    The resource defaults to ``Resource.create()``, which reads OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES, with ``service.name`` ``kiln-worker`` when neither names
    one; it is exposed as the ``target_info`` series. The SDK's exemplars are off: this
    reader does not expose them, and sampling them costs every measurement a look at the
    current span; kilnotel's own histograms carry exemplars taken from the job (see
    _exemplars). ``cardinality_limit``: the series each instrument keeps before folding
    the rest into one ``otel_metric_overflow="true"`` series (KilnMetricsOverflow).
    """
    limit = checked(cardinality_limit)
    registry = registry if registry is not None else CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry,
                                    **reader_options(PrometheusMetricReader, limit))
    provider = MeterProvider(
        metric_readers=[reader], resource=resource or default_resource(),
        exemplar_filter=AlwaysOffExemplarFilter(),
    )
    remember_registry(provider, registry)
    remember(provider, limit)
    return provider, registry


@dataclasses.dataclass
class MetricsServer:
    """A running /metrics endpoint; ``close()`` stops it."""

    registry: CollectorRegistry
    host: str
    port: int
    _httpd: WSGIServer
    _thread: threading.Thread
    observer: Observer | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def _registry_of(
    target: Any, cardinality_limit: int | None = None
) -> tuple[CollectorRegistry, Observer | None]:
    if isinstance(target, CollectorRegistry):
        return target, None
    if isinstance(target, Server):
        observer = observer_of(target)
        if observer is None:
            provider, _registry = prometheus_provider(
                cardinality_limit=cardinality_limit or n.CARDINALITY_LIMIT)
            observer = observe(target, provider)
        target = observer
    if isinstance(target, Observer):
        if target.registry is None:
            raise ValueError(
                "this server was observed with a MeterProvider that has no Prometheus "
                "reader: pass kilnotel.prometheus_provider()'s provider to observe(), "
                "or serve its registry"
            )
        return target.registry, target
    raise TypeError(f"serve() takes a Server, an Observer or a CollectorRegistry, not {target!r}")


def serve(
    target: Server | Observer | CollectorRegistry,
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    *,
    cardinality_limit: int | None = None,
) -> MetricsServer:
    """Serve ``/metrics`` from ``target``'s own registry on ``host:port`` (port 0: any).

    A Server not yet observed is observed here with a new prometheus_provider() (made
    with ``cardinality_limit``, 2,000 series per instrument by default). The endpoint
    runs in a daemon thread; it binds loopback unless told otherwise.
    """
    registry, observer = _registry_of(target, cardinality_limit)
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    thread.name = "kilnotel-metrics"
    return MetricsServer(registry, host, int(httpd.server_port), httpd, thread, observer)
