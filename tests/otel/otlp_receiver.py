"""An in-process OTLP/HTTP receiver on loopback: what a collector would get from kiln.

It accepts ``POST /v1/traces`` and ``POST /v1/metrics`` with protobuf bodies (gzip or
not), decodes them with the OTLP protobuf messages (opentelemetry-proto) and keeps the
spans, the metric data points and the request headers for the test to look at.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


class Receiver:
    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], Any]] = []  # (resource attributes, Span)
        self.points: list[tuple[dict[str, Any], str, Any]] = []  # (resource, metric, point)
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the http.server API's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = receiver.take(self.path, body, dict(self.headers.items()))
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True,
                                        name="otlp-receiver")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def take(self, path: str, body: bytes, headers: dict[str, str]) -> bool:
        with self._lock:
            self.paths.append(path)
            self.headers.append(headers)
            if path == "/v1/traces":
                traces = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                for rs in traces.resource_spans:
                    resource = attributes(rs.resource.attributes)
                    for ss in rs.scope_spans:
                        self.spans.extend((resource, span) for span in ss.spans)
                return True
            if path == "/v1/metrics":
                metrics = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
                for rm in metrics.resource_metrics:
                    resource = attributes(rm.resource.attributes)
                    for sm in rm.scope_metrics:
                        for metric in sm.metrics:
                            data = getattr(metric, metric.WhichOneof("data"))
                            self.points.extend((resource, metric.name, p)
                                               for p in data.data_points)
                return True
            return False

    def span_list(self) -> list[tuple[dict[str, Any], Any]]:
        with self._lock:
            return list(self.spans)

    def latest(self, metric: str, **attrs: Any) -> list[Any]:
        """The points of ``metric`` whose attributes include ``attrs`` (dots as _)."""
        with self._lock:
            points = [p for _r, name, p in self.points if name == metric]
        return [p for p in points if _includes(attributes(p.attributes), attrs)]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def _includes(have: dict[str, Any], want: dict[str, Any]) -> bool:
    flat = {k.replace(".", "_"): v for k, v in have.items()}
    return all(flat.get(k) == v for k, v in want.items())


def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()
