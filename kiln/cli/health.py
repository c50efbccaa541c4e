"""The worker's probe endpoint: ``GET /healthz`` and ``GET /stats`` as JSON.

Both answer 200 while ``server.healthy()`` holds and 503 otherwise (not yet running,
shutting down, fenced, heartbeat stale, results piling up), so either can back a
readiness or liveness probe. A few lines of HTTP/1.0 on asyncio.start_server:
no dependency, one request per connection, bound to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Protocol

from kiln._server import Health

log = logging.getLogger("kiln.health")

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            503: "Service Unavailable"}
_MAX_HEADER_LINES = 100
_READ_TIMEOUT = 5.0


class Snapshot(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


class Probed(Protocol):
    """What the endpoint serves: a ``Server`` (``stats()`` is a ``ServerStats``)."""

    def healthy(self) -> Health: ...
    def stats(self) -> Snapshot: ...


class HealthServer:
    """Serves one server's health and stats; ``start`` binds, ``stop`` is idempotent."""

    def __init__(self, target: Probed, port: int, host: str = "127.0.0.1") -> None:
        self.target = target
        self.host = host
        self.requested_port = port
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            return self.requested_port
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.requested_port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)

    def respond(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """Status and JSON body for one request (public for tests)."""
        if method not in ("GET", "HEAD"):
            return 405, {"error": f"method {method} not allowed"}
        path = path.split("?", 1)[0]
        if path not in ("/healthz", "/stats"):
            return 404, {"error": f"no such path {path!r}: try /healthz or /stats"}
        health = self.target.healthy()
        status = 200 if health.ok else 503
        if path == "/healthz":
            return status, {"healthy": health.ok, **health.as_dict()}
        return status, {"healthy": health.ok, **self.target.stats().as_dict()}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_READ_TIMEOUT):
                request = await reader.readline()
                for _ in range(_MAX_HEADER_LINES):
                    if (await reader.readline()).strip() == b"":
                        break
            parts = request.decode("latin-1").split()
            if len(parts) < 2:
                status, body = 400, {"error": "malformed request line"}
                method = "GET"
            else:
                method = parts[0]
                status, body = self.respond(method, parts[1])
            await self._write(writer, status, body, head=method == "HEAD")
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        except Exception:  # a probe must never take the worker down
            log.exception("health endpoint failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), timeout=1.0)

    @staticmethod
    async def _write(
        writer: asyncio.StreamWriter, status: int, body: dict[str, Any], head: bool
    ) -> None:
        payload = json.dumps(body, default=str).encode()
        header = (
            f"HTTP/1.0 {status} {_REASONS.get(status, 'Error')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        writer.write(header if head else header + payload)
        await writer.drain()
