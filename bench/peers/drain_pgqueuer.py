"""pgqueuer side of the drain benchmark (runs in the peers' venv).

Usage: drain_pgqueuer.py URL fill N | drain_pgqueuer.py URL work CONCURRENCY
"fill" installs the schema and enqueues N jobs; "install" only the schema (N ignored);
"enqueue" only the jobs, into a database that has the schema.
"""

from __future__ import annotations

import asyncio
import sys

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.models import Job


async def fill(url: str, n: int, install: bool = True) -> None:
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    if install:
        await queries.install()
    for start in range(0, n, 1000):
        size = min(1000, n - start)
        await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
    await conn.close()


async def work(url: str, concurrency: int) -> None:
    conn = await asyncpg.connect(url)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("noop")
    async def noop(job: Job) -> None:
        return None

    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await qm.run(batch_size=concurrency)


if __name__ == "__main__":
    url, mode, number = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "work":
        asyncio.run(work(url, number))
    else:
        asyncio.run(fill(url, 0 if mode == "install" else number, install=mode != "enqueue"))
