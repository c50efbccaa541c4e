"""The demo behind ``kiln demo``: an app with a few job kinds, a steady trickle of
jobs, and a live summary line.

Owns the demo's job kinds, the trickle and the summary. It does not parse
arguments or serve HTTP: kiln/cli/demo.py wires the optional dashboard and
metrics around it. Everything runs in one process on the embedded SQLite default.

The kinds show every path a job can take: ``demo.resize`` succeeds, ``demo.email``
fails its first attempts and then succeeds, ``demo.report`` is a plain ``def``
that runs in a thread and checkpoints its progress, ``demo.webhook`` fails for
good after three attempts, and ``demo.reminder`` is enqueued with a delay.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any

from kiln._app import App
from kiln._model._job import JobState
from kiln._model._retry import Constant, Exponential
from kiln._server import Job, Server, ServerConfig

DEMO_URL = "sqlite:///kiln-demo.db"
QUEUES = {"default": 4, "media": 8, "mail": 4}
CONFIG = ServerConfig(
    poll_interval=0.25, shutdown_timeout=5.0, kill_grace=1.0,
    prune_completed_after=3600.0, prune_cancelled_after=3600.0,
)
# relative weights of the kinds in the trickle
MIX = {"demo.resize": 6.0, "demo.email": 3.0, "demo.report": 1.0, "demo.webhook": 0.5,
       "demo.reminder": 1.0}
SHOWN_STATES = (JobState.SCHEDULED, JobState.AVAILABLE, JobState.RUNNING, JobState.COMPLETED,
                JobState.FAILED, JobState.CANCELLED)


def build_app(url: str = DEMO_URL) -> App:
    # No Bus: with one, the releaser trusts wake-ups and (as of this writing) can hold a
    # retry until the next delayed job is due; polling every 0.25s keeps the demo honest.
    app = App(url)

    @app.job("demo.resize", queue="media", timeout=10)
    async def resize(job: Job) -> None:
        await asyncio.sleep(random.uniform(0.05, 0.4))

    @app.job("demo.email", queue="mail", max_attempts=5, backoff=Exponential(0.5, 4))
    async def email(job: Job) -> None:
        await asyncio.sleep(random.uniform(0.02, 0.1))
        if job.attempt <= int(job.args.get("flaky", 0)):
            raise ConnectionError(f"smtp.example.com reset the connection (attempt {job.attempt})")

    @app.job("demo.report", max_attempts=3)
    def report(job: Job) -> None:  # a plain def: runs in the server's thread pool
        for page in range(int(job.params.get("page", 0)), int(job.args.get("pages", 3))):
            time.sleep(0.05)
            job.set_param_sync("page", page + 1)  # a retried attempt resumes here

    @app.job("demo.webhook", max_attempts=3, backoff=Constant(1.0))
    async def webhook(job: Job) -> None:
        raise RuntimeError(f"{job.args.get('url')} answered 410 Gone")

    @app.job("demo.reminder", queue="mail")
    async def reminder(job: Job) -> None:
        await asyncio.sleep(0.01)

    return app


def job_for(kind: str, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Arguments and enqueue options of the ``n``-th demo job of ``kind``."""
    if kind == "demo.resize":
        return {"image": f"photo-{n}.jpg", "width": 320}, {}
    if kind == "demo.email":
        return {"to": f"user{n}@example.com", "flaky": random.choice((0, 0, 1, 2))}, {}
    if kind == "demo.report":
        return {"pages": random.randint(2, 5)}, {}
    if kind == "demo.webhook":
        return {"url": f"https://hooks.example.com/{n}"}, {}
    return {"user": n}, {"delay": random.uniform(5.0, 20.0)}


async def trickle(app: App, per_second: float, stop: asyncio.Event) -> None:
    """Enqueue one of each kind, then random kinds at about ``per_second``."""
    kinds, weights = list(MIX), list(MIX.values())
    n = 0
    for kind in kinds:  # one of each first, so every path shows within seconds
        args, options = job_for(kind, n)
        if kind == "demo.email":
            args["flaky"] = 2
        await app.aenqueue(kind, args, **options)
        n += 1
    while not stop.is_set():
        kind = random.choices(kinds, weights)[0]
        args, options = job_for(kind, n)
        await app.aenqueue(kind, args, **options)
        n += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), random.expovariate(per_second))


class Summary:
    """One readable line of counts by state and throughput since the last line."""

    def __init__(self, server: Server, app: App) -> None:
        self.server = server
        self.app = app
        self.started = time.monotonic()
        self._last = (self.started, 0)

    def _finished(self) -> int:
        stats = self.server.stats()
        return stats.completed + stats.failed + stats.cancelled

    async def line(self, final: bool = False) -> str:
        by_state = {state: 0 for state in JobState}
        for count in await self.app.client().counts():
            by_state[count.state] += count.count
        now, finished = time.monotonic(), self._finished()
        last_at, last_finished = self._last
        rate = (finished - last_finished) / max(now - last_at, 1e-6)
        self._last = (now, finished)
        stats = self.server.stats()
        states = "  ".join(f"{state.value} {by_state[state]}" for state in SHOWN_STATES)
        label = f"stopped after {now - self.started:.0f}s" if final else \
            f"{now - self.started:5.0f}s"
        return (f"[{label}] {rate:5.1f} jobs/s | {states} | "
                f"this run: completed {stats.completed}, retried {stats.retried}, "
                f"failed {stats.failed}")


async def run(
    app: App, server: Server, *, duration: float | None, interval: float, per_second: float,
    write: Callable[[str], None],
) -> None:
    """Run the server, the trickle and the summary until ``duration`` or a signal."""
    stop = asyncio.Event()
    serving = asyncio.create_task(server.run(), name="kiln-demo-server")
    feeding = asyncio.create_task(trickle(app, per_second, stop), name="kiln-demo-trickle")
    summary = Summary(server, app)
    deadline = None if duration is None else time.monotonic() + duration
    try:
        while not serving.done():
            left = interval if deadline is None else min(interval, deadline - time.monotonic())
            if left <= 0:
                break
            await asyncio.wait({serving}, timeout=left)
            if not serving.done() and left == interval:
                write(await summary.line())
    finally:
        stop.set()
        fed = await asyncio.gather(feeding, return_exceptions=True)
        if isinstance(fed[0], Exception):
            write(f"the trickle of jobs stopped: {fed[0]}")
        server.stop()
        try:
            await serving
            write(await summary.line(final=True))
        finally:
            await app.client().close()
