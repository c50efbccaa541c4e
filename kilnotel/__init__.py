"""kilnotel: OpenTelemetry metrics and traces for kiln, and a Prometheus endpoint.

    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, meter_provider=provider)
    kilnotel.serve(registry, port=9464)

or, for the queues of a database whatever workers run (``kiln exporter``)::

    exporter = kilnotel.QueueExporter(app.client(), provider)
    await exporter.run(stop)

or, to an OpenTelemetry collector over OTLP (the OTEL_EXPORTER_OTLP_* variables apply)::

    export = kilnotel.export_otlp(server, "http://127.0.0.1:4318")
    await server.run()
    export.close()  # exports what is left

Every metric and span name lives in ``kilnotel.names``. The core (``kiln``) never
imports this package: it emits events and takes middleware and enqueue hooks.
"""

from kilnotel import _names as names
from kilnotel._exporter import QueueExporter
from kilnotel._logs import TraceContextFilter
from kilnotel._observe import Observer, observe, observe_app, observe_client
from kilnotel._otlp import OtlpConfigError, OtlpExport, export_otlp, otlp_providers
from kilnotel._prometheus import MetricsServer, prometheus_provider, serve
from kilnotel._sampling import ProducerSampler

__all__ = [
    "MetricsServer",
    "Observer",
    "OtlpConfigError",
    "OtlpExport",
    "ProducerSampler",
    "QueueExporter",
    "TraceContextFilter",
    "export_otlp",
    "names",
    "observe",
    "observe_app",
    "observe_client",
    "otlp_providers",
    "prometheus_provider",
    "serve",
]
