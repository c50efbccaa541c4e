"""Run one worker process for the tests.

Usage: python -m tests.plugins.run_worker MODULE:APP QUEUE=N [CONFIG_JSON]
Prints ``READY <server id> <notifications: true|false>`` once running and
``STATS <json>`` after ``run()`` returns.
KILN_TEST_NO_LISTEN=1 makes the server ignore its store's LISTEN/NOTIFY (it polls).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import sys
from typing import Any

import kiln
from kiln._server import run_in_new_loop
from tests.plugins.parent import exit_with_parent
from tests.plugins.workers import load_app


async def main(app_spec: str, queue: str, config: dict[str, Any]) -> None:
    exit_with_parent()
    app = load_app(app_spec)
    name, _, concurrency = queue.partition("=")
    server = app.server({name: int(concurrency or 10)}, kiln.ServerConfig(**config))
    if os.environ.get("KILN_TEST_NO_LISTEN") == "1":
        caps = dataclasses.replace(
            server._store.capabilities, listen_notify=False, claim_on_notify=False
        )
        server._store.capabilities = caps  # this instance only
    task = asyncio.create_task(server.run())
    while server.stats().state != "running":
        if task.done():
            await task
        await asyncio.sleep(0.01)
    print(f"READY {server.id} {json.dumps(server.stats().notifications)}", flush=True)
    await task
    stats = {k: v for k, v in server.stats().as_dict().items()
             if isinstance(v, int | float | str | bool)}
    print(f"STATS {json.dumps(stats)}", flush=True)


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    config = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    run_in_new_loop(main(sys.argv[1], sys.argv[2], config))
