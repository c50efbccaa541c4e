"""procrastinate side of the pickup-latency benchmark (runs in the peers' venv).

Usage: latency_procrastinate.py URL work LOG | latency_procrastinate.py URL enqueue N INTERVAL FIRST
Same protocol as bench/latency_kiln.py.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import procrastinate

LOG: list[str] = []


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="lat", queue="lat")
    async def lat(n: int) -> None:
        with open(LOG[0], "a") as out:
            out.write(f"{n} {time.time():.6f}\n")

    return app


async def work(url: str, log: str) -> None:
    LOG.append(log)
    app = make_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        print("READY", flush=True)
        await app.run_worker_async(queues=["lat"], concurrency=10, wait=True)


async def enqueue(url: str, n: int, interval: float, first: int) -> None:
    app = make_app(url)
    returned = []
    async with app.open_async():
        task = app.tasks["lat"]
        start = time.monotonic()
        for i in range(first, first + n):
            await asyncio.sleep(max(start + (i - first) * interval - time.monotonic(), 0.0))
            await task.defer_async(n=i)
            returned.append(time.time())
    print(json.dumps(returned), flush=True)


if __name__ == "__main__":
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "work":
        asyncio.run(work(url, sys.argv[3]))
    else:
        asyncio.run(enqueue(url, int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
