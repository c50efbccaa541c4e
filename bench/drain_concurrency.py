"""Worker of the concurrency-limit benchmark: one process, no-op jobs.

Usage: python -m bench.drain_concurrency URL CONCURRENCY MODE
MODE: plain (no limit), kind (a per-tenant kiln.Concurrency that never binds) or
queue (a queue limit that never binds). Prints READY, starts on a line from stdin.
"""

from __future__ import annotations

import asyncio
import sys

import kiln

LIMIT = 1000  # far above the worker's concurrency: the limit never binds


def app_for(url: str, mode: str) -> kiln.App:
    """The app both the filler and the worker use, so both see the same declaration."""
    app = kiln.App(url)
    options = {"concurrency": kiln.Concurrency(max=LIMIT, key="args.t")} if mode == "kind" else {}

    @app.job("noop", **options)
    async def noop(job: kiln.Job) -> None:
        return None

    if mode == "queue":
        app.queue_concurrency("default", kiln.Concurrency(max=LIMIT))
    return app


async def main(url: str, concurrency: int, mode: str) -> None:
    server = app_for(url, mode).server({"default": concurrency})
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await server.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
