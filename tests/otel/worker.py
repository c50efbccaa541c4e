"""A worker process for the /metrics test: ``python -m tests.otel.worker URL``.

Serves /metrics the way ``kiln worker --metrics-port`` does (``kilnotel.serve(server)``
before ``server.run()``), on a free loopback port that it prints as ``READY <port>``.
"""

from __future__ import annotations

import asyncio
import sys

import kiln
import kilnotel
from tests.otel.jobs import FAST, make_app


async def main(url: str) -> None:
    app = make_app(url)
    server = app.server({"default": 4, "idle": 1}, kiln.ServerConfig(**FAST))  # type: ignore[arg-type]
    metrics = kilnotel.serve(server, port=0, host="127.0.0.1")
    print(f"READY {metrics.port}", flush=True)
    try:
        await server.run()
    finally:
        metrics.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
