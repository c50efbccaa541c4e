"""One worker process of a chaos run: ``python -m tests.chaos.worker SPEC_JSON``.

SPEC: url, label, log (the run's ledger), concurrency and config (ServerConfig
fields). It logs ``ready`` once running, the server's leader/rescue/fence/result
events (tests/cluster/worker.py's ``subscribe``), ``rejoined`` when a fenced server
heartbeats under its new id, and ``stopped`` when ``run()`` returns after a SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import kiln
import kiln.events
from kiln._server import run_in_new_loop
from tests.chaos.app import QUEUE, build_app
from tests.cluster.worker import Log, subscribe
from tests.plugins.parent import exit_with_parent


async def main(spec: dict[str, Any]) -> None:
    exit_with_parent()
    log = Log(spec["log"], spec["label"])
    app = build_app(spec["url"], log)
    server = kiln.Server(
        app.new_store(), app.kinds, {QUEUE: int(spec["concurrency"])},
        kiln.ServerConfig(**spec["config"]),
    )
    subscribe(server, log)
    ids: list[str] = []

    def on_heartbeat(event: kiln.events.Event) -> None:
        if (isinstance(event, kiln.events.Heartbeat) and event.ok
                and event.server_id not in ids[-1:]):
            if ids:
                log("rejoined", server=event.server_id, old=ids[-1])
            ids.append(event.server_id)

    server.events.subscribe(on_heartbeat)
    run = asyncio.create_task(server.run())
    while server.stats().state != "running":
        if run.done():
            await run
        await asyncio.sleep(0.01)
    log("ready", server=server.id)
    await run
    log("stopped", server=server.id)


if __name__ == "__main__":
    run_in_new_loop(main(json.loads(sys.argv[1])))
