"""kiln side of the drain benchmark: one worker process, no-op jobs.

Usage: python -m bench.drain_kiln URL CONCURRENCY [observe]
Prints READY once imported and connected, starts on a line from stdin.
"""

from __future__ import annotations

import asyncio
import sys

import kiln


async def main(url: str, concurrency: int, observe: bool) -> None:
    app = kiln.App(url)

    @app.job("noop")
    async def noop(job: kiln.Job) -> None:
        return None

    server = app.server({"default": concurrency})
    if observe:
        from opentelemetry.sdk.trace import TracerProvider

        import kilnotel  # type: ignore[import-not-found,unused-ignore]

        kilnotel.observe(server, tracer_provider=TracerProvider())
    print("READY", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await server.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), len(sys.argv) > 3 and sys.argv[3] == "observe"))
