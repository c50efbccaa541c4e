"""procrastinate side of the drain benchmark (runs in the peers' venv).

Usage: drain_procrastinate.py URL fill N | drain_procrastinate.py URL work CONCURRENCY
"fill" applies the schema and defers N jobs; "install" only the schema (N ignored);
"enqueue" only the jobs, into a database that has the schema.
"""

from __future__ import annotations

import asyncio
import sys

import procrastinate


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop")
    async def noop(n: int = 0) -> None:
        return None

    return app


async def fill(url: str, n: int, install: bool = True) -> None:
    app = make_app(url)
    async with app.open_async():
        if install:
            await app.schema_manager.apply_schema_async()
        task = app.tasks["noop"]
        for start in range(0, n, 1000):
            await task.batch_defer_async(*({"n": i} for i in range(start, min(start + 1000, n))))


async def work(url: str, concurrency: int) -> None:
    app = make_app(url)
    async with app.open_async():
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await app.run_worker_async(concurrency=concurrency, wait=True)


if __name__ == "__main__":
    url, mode, number = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "work":
        asyncio.run(work(url, number))
    else:
        asyncio.run(fill(url, 0 if mode == "install" else number, install=mode != "enqueue"))
