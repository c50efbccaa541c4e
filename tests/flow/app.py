"""The kiln App that flow tests run in worker processes.

KILN_DATABASE_URL picks the database; KILN_TEST_BUS=redis://... gives the app a
RedisBus on that URL (channel KILN_TEST_BUS_CHANNEL), so tests on separate databases
never wake each other.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import kiln

_bus_url = os.environ.get("KILN_TEST_BUS")
bus = (
    kiln.RedisBus(_bus_url, os.environ.get("KILN_TEST_BUS_CHANNEL", "kiln"))
    if _bus_url else None
)
app = kiln.App(os.environ.get("KILN_DATABASE_URL", "sqlite:///kiln-test.db"), bus=bus)

LIMIT = kiln.RateLimit(rate=4, per=0.5, burst=1)


@app.job("limited", rate_limit=LIMIT)
async def limited(job: kiln.Job) -> None:
    return None


@app.job("step", max_attempts=1)
async def step(job: kiln.Job) -> None:
    """Fails while the file ``args["fail_unless"]`` (if given) does not exist."""
    need = job.args.get("fail_unless")
    if need and not Path(need).exists():
        raise RuntimeError(f"{need} is missing")
    await asyncio.sleep(float(job.args.get("seconds", 0.0)))


@app.job("checkpointed", max_attempts=5)
async def checkpointed(job: kiln.Job) -> None:
    """Works through ``steps`` steps, checkpointing the cursor after each one; records
    the cursor every attempt started from in the ``starts`` param."""
    cursor = int(job.params.get("cursor", 0))
    await job.set_param("starts", [*job.params.get("starts", []), cursor])
    for i in range(cursor, int(job.args["steps"])):
        await asyncio.sleep(float(job.args["step_seconds"]))
        await job.set_param("cursor", i + 1)


@app.job("checkpointed_sync", max_attempts=5)
def checkpointed_sync(job: kiln.Job) -> None:
    """The plain-def form. It ignores cancellation, as sync code does, and logs the
    checkpoint a fenced write refused into ``args["log"]``."""
    cursor = int(job.params.get("cursor", 0))
    job.set_param_sync("starts", [*job.params.get("starts", []), cursor])
    for i in range(cursor, int(job.args["steps"])):
        time.sleep(float(job.args["step_seconds"]))
        try:
            job.set_param_sync("cursor", i + 1)
        except kiln.FencedError:
            with open(job.args["log"], "a") as f:
                f.write(f"fenced {job.attempt} {i + 1}\n")
            return


@app.job("clock")
async def clock(job: kiln.Job) -> None:
    """Records when the handler started, for latency tests."""
    with open(job.args["log"], "a") as f:
        f.write(f"{job.id} {time.time():.6f}\n")
