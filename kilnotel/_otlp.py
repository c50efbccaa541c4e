"""OTLP export: metrics and spans of a server pushed to an OpenTelemetry collector.

Owns the choice of exporter (OTLP over HTTP/protobuf, the default, or gRPC, from
``OTEL_EXPORTER_OTLP_PROTOCOL`` and its per-signal variants), the providers around them
and the handle that flushes and shuts them down. Everything else the exporters and the
SDK read from the standard environment: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and
``..._TRACES_ENDPOINT``/``..._METRICS_ENDPOINT``), ``..._HEADERS``, ``..._TIMEOUT``,
``..._COMPRESSION``, ``..._CERTIFICATE``, ``OTEL_METRIC_EXPORT_INTERVAL``,
``OTEL_BSP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_TRACES_SAMPLER``. An explicit ``endpoint`` (``kiln worker --otlp-endpoint``) is the
collector's base URL, as ``OTEL_EXPORTER_OTLP_ENDPOINT`` is: over HTTP each signal goes
to its path under it (``/v1/traces``, ``/v1/metrics``).

The meter provider here is an SDK one, so histograms are SDK histograms (one ``record``
per observation) rather than kilnotel's Prometheus-only fast path. With a Prometheus
registry as well (``--metrics-port`` together with OTLP) the same provider feeds both.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased
from prometheus_client import CollectorRegistry

from kiln import Server
from kilnotel import _names as n
from kilnotel._cardinality import checked, reader_options, remember
from kilnotel._observe import Observer, observe
from kilnotel._prometheus import MetricsServer, default_resource, serve
from kilnotel._sampling import ProducerSampler

PROTOCOLS = ("http/protobuf", "grpc")
# (module, class) of each signal's exporter, by protocol
_EXPORTERS = {
    ("http/protobuf", "traces"): ("opentelemetry.exporter.otlp.proto.http.trace_exporter",
                                  "OTLPSpanExporter"),
    ("http/protobuf", "metrics"): ("opentelemetry.exporter.otlp.proto.http.metric_exporter",
                                   "OTLPMetricExporter"),
    ("grpc", "traces"): ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
                         "OTLPSpanExporter"),
    ("grpc", "metrics"): ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
                          "OTLPMetricExporter"),
}
_PACKAGES = {"http/protobuf": "opentelemetry-exporter-otlp-proto-http",
             "grpc": "opentelemetry-exporter-otlp-proto-grpc"}
# variables that ask for OTLP export (kiln worker turns it on when one is set)
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                      "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")


class OtlpConfigError(ValueError):
    """An OTLP setting kilnotel cannot honour; the message names it."""


def wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for OTLP export: an OTLP endpoint variable is set
    and the SDK is not disabled (``OTEL_SDK_DISABLED=true``)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def protocol(signal: str, environ: Mapping[str, str] | None = None) -> str:
    """The OTLP protocol of ``signal`` ("traces" or "metrics"): its own variable, else
    ``OTEL_EXPORTER_OTLP_PROTOCOL``, else http/protobuf."""
    env = os.environ if environ is None else environ
    own = f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL"
    for name in (own, "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = env.get(name, "").strip()
        if value:
            if value not in PROTOCOLS:
                raise OtlpConfigError(f"{name}={value!r}: kilnotel exports OTLP over "
                                      f"{' or '.join(PROTOCOLS)}")
            return value
    return "http/protobuf"


def _exporter(signal: str, endpoint: str | None, environ: Mapping[str, str] | None) -> Any:
    proto = protocol(signal, environ)
    module_name, cls = _EXPORTERS[proto, signal]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise OtlpConfigError(f"OTLP over {proto} needs {_PACKAGES[proto]} ({exc}): "
                              f"pip install {_PACKAGES[proto]}") from exc
    if endpoint is None:
        return getattr(module, cls)()  # the exporter reads the OTEL_* variables
    url = endpoint.rstrip("/")
    if proto == "http/protobuf":
        url = f"{url}/v1/{signal}"
    return getattr(module, cls)(endpoint=url)


def _disabled(signal: str, environ: Mapping[str, str] | None) -> bool:
    """``OTEL_TRACES_EXPORTER=none`` / ``OTEL_METRICS_EXPORTER=none`` turn a signal off."""
    env = os.environ if environ is None else environ
    return env.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower() == "none"


def otlp_providers(
    endpoint: str | None = None,
    *,
    registry: CollectorRegistry | None = None,
    resource: Resource | None = None,
    environ: Mapping[str, str] | None = None,
    cardinality_limit: int = n.CARDINALITY_LIMIT,
    sample_ratio: float | None = None,
) -> tuple[MeterProvider, TracerProvider | None]:
    """A MeterProvider that exports over OTLP every ``OTEL_METRIC_EXPORT_INTERVAL``
    (60 s by default), and a TracerProvider whose BatchSpanProcessor exports spans over
    OTLP (None when ``OTEL_TRACES_EXPORTER=none``).

    ``endpoint``: the collector's base URL (``http://collector:4318``), as
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; None lets the exporters read the environment.
    ``registry``: also read the metrics into this Prometheus registry, for /metrics.
    ``cardinality_limit``: the series each instrument keeps before folding the rest into
    one ``otel_metric_overflow`` series, on every reader. ``sample_ratio``: unless
    ``OTEL_TRACES_SAMPLER`` is set, spans are sampled by
    ``ParentBased(ProducerSampler(sample_ratio))``: an attempt whose enqueuing request was
    traced is kept, the others at the ratio (None: the SDK's default, every span).
    """
    if endpoint is not None and not endpoint.strip():
        raise OtlpConfigError("the OTLP endpoint is empty: give a URL such as "
                              "http://127.0.0.1:4318")
    limit = checked(cardinality_limit)
    resource = resource or default_resource()
    # every exporter first: a bad setting raises before any reader thread starts
    metric_exporter = None if _disabled("metrics", environ) else _exporter(
        "metrics", endpoint, environ)
    span_exporter = None if _disabled("traces", environ) else _exporter(
        "traces", endpoint, environ)
    readers: list[MetricReader] = []
    if metric_exporter is not None:
        readers.append(PeriodicExportingMetricReader(
            metric_exporter, **reader_options(PeriodicExportingMetricReader, limit)))
    if registry is not None:
        readers.append(PrometheusMetricReader(
            registry=registry, **reader_options(PrometheusMetricReader, limit)))
    tracer_provider = None
    if span_exporter is not None:
        env = os.environ if environ is None else environ
        sampler = None
        if sample_ratio is not None and not env.get("OTEL_TRACES_SAMPLER", "").strip():
            sampler = ParentBased(ProducerSampler(sample_ratio))
        tracer_provider = TracerProvider(resource=resource, sampler=sampler)
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
    meter_provider = MeterProvider(metric_readers=readers, resource=resource,
                                   exemplar_filter=AlwaysOffExemplarFilter())
    remember(meter_provider, limit)
    return meter_provider, tracer_provider


@dataclasses.dataclass
class OtlpExport:
    """A server exported over OTLP (and maybe served on /metrics). ``close()`` stops the
    endpoint, detaches the observer and shuts the providers down, which exports what is
    left (the last metrics, the spans still batched); ``aclose()`` does it off the loop."""

    observer: Observer
    meter_provider: MeterProvider
    tracer_provider: TracerProvider | None
    metrics: MetricsServer | None = None

    @property
    def url(self) -> str | None:
        return self.metrics.url if self.metrics is not None else None

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
        self.observer.close()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)


def export_otlp(
    server: Server,
    endpoint: str | None = None,
    *,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    environ: Mapping[str, str] | None = None,
    global_tracer: bool = False,
    cardinality_limit: int = n.CARDINALITY_LIMIT,
    sample_ratio: float | None = None,
) -> OtlpExport:
    """Observe ``server`` with OTLP providers (``otlp_providers``); with
    ``metrics_port``, serve the same metrics on /metrics too. Call before
    ``server.run()``; ``close()`` the result after it returns.

    ``global_tracer``: also make the tracer provider the global one, unless one is set
    already, so that the spans handlers make with ``trace.get_tracer(...)`` are
    exported too, as children of their attempt's ``process`` span (kiln worker does)."""
    registry = CollectorRegistry() if metrics_port is not None else None
    meter_provider, tracer_provider = otlp_providers(endpoint, registry=registry,
                                                     environ=environ,
                                                     cardinality_limit=cardinality_limit,
                                                     sample_ratio=sample_ratio)
    observer = observe(server, meter_provider, tracer_provider,
                       traces=tracer_provider is not None)
    if (global_tracer and tracer_provider is not None
            and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)):
        trace.set_tracer_provider(tracer_provider)
    metrics = None
    if registry is not None and metrics_port is not None:
        metrics = serve(registry, port=metrics_port, host=metrics_host)
    return OtlpExport(observer, meter_provider, tracer_provider, metrics)
