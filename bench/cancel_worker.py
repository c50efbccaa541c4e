"""The worker process of bench/bench_cancel.py: ``python -m bench.cancel_worker SPEC_JSON``.

SPEC: url, log (JSON lines: t, ev = start | stop, job), heartbeat (seconds) and
optionally bus ({"url", "channel"}: a RedisBus). Runs queue ``hold`` with two kinds
that wait until cancelled: ``hold`` (async def, its task is cancelled) and
``hold_sync`` (plain def, it waits on job.cancelled).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import kiln


def main(spec: dict[str, Any]) -> None:
    fd = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(ev: str, job: int) -> None:
        os.write(fd, (json.dumps({"t": time.time(), "ev": ev, "job": job}) + "\n").encode())

    bus = kiln.RedisBus(spec["bus"]["url"], spec["bus"]["channel"]) if spec.get("bus") else None
    app = kiln.App(spec["url"], bus=bus)

    @app.job("hold", queue="hold")
    async def hold(job: kiln.Job) -> None:
        log("start", job.id)
        try:
            await asyncio.sleep(120)
        finally:
            log("stop", job.id)

    @app.job("hold_sync", queue="hold")
    def hold_sync(job: kiln.Job) -> None:
        log("start", job.id)
        job.cancelled.wait(120)
        log("stop", job.id)

    heartbeat = float(spec["heartbeat"])
    config = kiln.ServerConfig(
        poll_interval=0.2, heartbeat_interval=heartbeat, kill_grace=0.5,
        dead_after=max(60.0, 3 * heartbeat + 10), shutdown_timeout=1.0,
    )
    app.server({"hold": 2}, config).run_sync()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
