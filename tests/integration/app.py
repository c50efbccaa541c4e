"""The kiln App that integration tests run in real worker processes.

The database URL comes from KILN_DATABASE_URL; every handler is small and named for
the behaviour a test needs.
"""

from __future__ import annotations

import asyncio
import os
import time

import kiln

app = kiln.App(os.environ.get("KILN_DATABASE_URL", "sqlite:///kiln-test.db"))


@app.job("noop")
async def noop(job: kiln.Job) -> None:
    return None


@app.job("sync_noop")
def sync_noop(job: kiln.Job) -> None:
    return None


@app.job("flaky", max_attempts=3, backoff=kiln.Exponential(0.3, 5.0))
async def flaky(job: kiln.Job) -> None:
    raise RuntimeError(f"flaky failure on attempt {job.attempt}")


@app.job("slow", timeout=0.5, max_attempts=1)
async def slow(job: kiln.Job) -> None:
    await asyncio.sleep(30)


@app.job("sync_sleep")
def sync_sleep(job: kiln.Job) -> None:
    time.sleep(float(job.args["seconds"]))


@app.job("long")
async def long(job: kiln.Job) -> None:
    await asyncio.sleep(float(job.args["seconds"]))


@app.job("stubborn")
async def stubborn(job: kiln.Job) -> None:
    """Ignores cancellation for as long as ``seconds``."""
    deadline = time.monotonic() + float(job.args["seconds"])
    while time.monotonic() < deadline:
        try:
            await asyncio.sleep(deadline - time.monotonic())
        except asyncio.CancelledError:
            continue


@app.job("snoozer")
async def snoozer(job: kiln.Job) -> kiln.Snooze | None:
    if not job.params.get("snoozed"):
        await job.set_param("snoozed", True)
        return kiln.Snooze(0.2)
    return None


@app.job("canceller")
async def canceller(job: kiln.Job) -> kiln.Cancel:
    return kiln.Cancel("not needed any more")
