"""kilnotel: OpenTelemetry metrics and traces for kiln, and a Prometheus endpoint.

    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, meter_provider=provider)
    kilnotel.serve(registry, port=9464)

Every metric and span name lives in ``kilnotel.names``. The core (``kiln``) never
imports this package: it emits events and takes middleware and enqueue hooks.
"""

from kilnotel import _names as names
from kilnotel._logs import TraceContextFilter
from kilnotel._observe import Observer, observe, observe_app, observe_client
from kilnotel._prometheus import MetricsServer, prometheus_provider, serve

__all__ = [
    "MetricsServer",
    "Observer",
    "TraceContextFilter",
    "names",
    "observe",
    "observe_app",
    "observe_client",
    "prometheus_provider",
    "serve",
]
