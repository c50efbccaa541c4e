"""Run one worker process for the integration tests.

Usage: python -m tests.integration.run_worker MODULE:APP QUEUE=N [CONFIG_JSON]
Prints ``READY <server id>`` once running and ``STOPPED`` after ``run()`` returns.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys

import logging

import kiln
from kiln._server import run_in_new_loop


async def main(spec: str, queue: str, config: dict[str, float]) -> None:
    module, attribute = spec.split(":")
    app: kiln.App = getattr(importlib.import_module(module), attribute)
    name, _, concurrency = queue.partition("=")
    server = app.server({name: int(concurrency or 10)}, kiln.ServerConfig(**config))
    task = asyncio.create_task(server.run())
    while server.stats()["state"] != "running":
        if task.done():
            await task
        await asyncio.sleep(0.01)
    print(f"READY {server.id}", flush=True)
    await task
    print("STOPPED", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    run_in_new_loop(main(sys.argv[1], sys.argv[2], config))
