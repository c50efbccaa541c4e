"""One process of the idle-cost benchmark: an idle worker or an idle API process.

Usage: python -m bench.idle_proc URL worker|api POLL_INTERVAL on|off [REDIS_URL]

``on``: notifications (LISTEN on PostgreSQL, a RedisBus at REDIS_URL otherwise);
``off``: none (a PostgreSQL store's LISTEN is switched off for this process).
Prints READY once running; then a line ``start`` on stdin begins the measured window
and ``stop`` ends it: the process prints {"queries": n, "seconds": s} and exits.
An API process opens a client (one count query) and otherwise waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import time

import kiln
from kiln.stores import Store


def make_app(url: str, notify: bool, redis_url: str) -> kiln.App:
    bus = kiln.RedisBus(redis_url) if notify and not url.startswith("postgres") else None
    app = kiln.App(url, bus=bus)

    @app.job("noop")
    async def noop(job: kiln.Job) -> None:
        return None

    return app


def quiet(store: Store, notify: bool) -> None:
    if not notify:
        store.capabilities = dataclasses.replace(store.capabilities, listen_notify=False)


async def measure(store: Store) -> None:
    loop = asyncio.get_running_loop()
    line = await loop.run_in_executor(None, sys.stdin.readline)
    assert line.strip() == "start", line
    before, began = store.query_count(), time.monotonic()
    line = await loop.run_in_executor(None, sys.stdin.readline)
    queries, seconds = store.query_count() - before, time.monotonic() - began
    print(json.dumps({"queries": queries, "seconds": seconds}), flush=True)


async def worker(app: kiln.App, poll: float, notify: bool) -> None:
    server = app.server({"default": 10}, kiln.ServerConfig(poll_interval=poll))
    quiet(server._store, notify)
    task = asyncio.create_task(server.run())
    while server.stats().state != "running":
        await asyncio.sleep(0.01)
    print(f"READY {json.dumps({'notifications': server.stats().notifications})}", flush=True)
    await measure(server._store)
    server.stop()
    await task


async def api(app: kiln.App, notify: bool) -> None:
    client = app.client()
    quiet(client._store, notify)
    await client.count(kiln.JobFilter())
    print("READY {}", flush=True)
    await measure(client._store)
    await client._store.close()


def main() -> None:
    url, role, poll, notify = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "on"
    app = make_app(url, notify, sys.argv[5] if len(sys.argv) > 5 else "redis://127.0.0.1:6379/0")
    asyncio.run(worker(app, poll, notify) if role == "worker" else api(app, notify))


if __name__ == "__main__":
    main()
