"""pgqueuer side of the pickup-latency benchmark (runs in the peers' venv).

Usage: latency_pgqueuer.py URL work LOG | latency_pgqueuer.py URL enqueue N INTERVAL FIRST
Same protocol as bench/latency_kiln.py.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.models import Job


async def work(url: str, log: str) -> None:
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    qm = QueueManager(queries)
    out = open(log, "a", buffering=1)  # noqa: SIM115

    @qm.entrypoint("lat")
    async def lat(job: Job) -> None:
        out.write(f"{int(job.payload or b'0')} {time.time():.6f}\n")

    print("READY", flush=True)
    await qm.run(batch_size=10)


async def enqueue(url: str, n: int, interval: float, first: int) -> None:
    conn = await asyncpg.connect(url)
    queries = Queries(AsyncpgDriver(conn))
    returned = []
    start = time.monotonic()
    for i in range(first, first + n):
        await asyncio.sleep(max(start + (i - first) * interval - time.monotonic(), 0.0))
        await queries.enqueue("lat", str(i).encode())
        returned.append(time.time())
    await conn.close()
    print(json.dumps(returned), flush=True)


if __name__ == "__main__":
    url, mode = sys.argv[1], sys.argv[2]
    if mode == "work":
        asyncio.run(work(url, sys.argv[3]))
    else:
        asyncio.run(enqueue(url, int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])))
