"""kiln side of the pickup-latency benchmark.

Usage: python -m bench.latency_kiln URL work LOG   (a worker; prints READY)
       python -m bench.latency_kiln URL enqueue N INTERVAL FIRST   (prints one JSON list)
       python -m bench.latency_kiln --window W URL ...   (the store's notify_window: W)

The handler appends "<n> <unix time>" to LOG as it starts. The enqueuer inserts jobs
FIRST..FIRST+N-1, job n at start + (n-FIRST)*INTERVAL, and prints the unix time at
which each enqueue call returned.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import kiln


def make_app(url: str, log: str = "", window: float | None = None) -> kiln.App:
    app = kiln.App(url) if window is None else kiln.App(url, notify_window=window)
    out = open(log, "a", buffering=1) if log else None  # noqa: SIM115 - lives as long as the worker

    @app.job("lat", queue="lat")
    async def lat(job: kiln.Job) -> None:
        assert out is not None
        out.write(f"{job.args['n']} {time.time():.6f}\n")

    return app


async def work(url: str, log: str) -> None:
    app = make_app(url, log)
    await app.amigrate()
    server = app.server({"lat": 10})
    task = asyncio.create_task(server.run())
    while server.stats().state != "running":
        await asyncio.sleep(0.01)
    print("READY", flush=True)
    await task


async def enqueue(url: str, n: int, interval: float, first: int,
                  window: float | None = None) -> None:
    client = make_app(url, window=window).client()
    returned = []
    start = time.monotonic()
    for i in range(first, first + n):
        await asyncio.sleep(max(start + (i - first) * interval - time.monotonic(), 0.0))
        await client.enqueue("lat", {"n": i})
        returned.append(time.time())
    await client._store.close()
    print(json.dumps(returned), flush=True)


if __name__ == "__main__":
    argv = sys.argv[1:]
    window = None
    if argv[0] == "--window":
        window, argv = float(argv[1]), argv[2:]
    url, mode = argv[0], argv[1]
    if mode == "work":
        asyncio.run(work(url, argv[2]))
    else:
        asyncio.run(enqueue(url, int(argv[2]), float(argv[3]), int(argv[4]), window))
