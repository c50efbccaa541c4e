"""A worker process: ``python -m tests.otel.worker URL [QUEUES_JSON]``.

Serves /metrics the way ``kiln worker --metrics-port`` does (``kilnotel.serve(server)``
before ``server.run()``), on a free loopback port that it prints as ``READY <port>``.
"""

from __future__ import annotations

import asyncio
import json
import sys

import kilnotel
from tests.otel.jobs import make_app
from tests.support.otel import fast_config


async def main(url: str, queues: dict[str, int]) -> None:
    app = make_app(url)
    server = app.server(queues, fast_config())
    metrics = kilnotel.serve(server, port=0, host="127.0.0.1")
    print(f"READY {metrics.port}", flush=True)
    try:
        await server.run()
    finally:
        metrics.close()


if __name__ == "__main__":
    queues = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {"default": 4, "idle": 1}
    asyncio.run(main(sys.argv[1], queues))
