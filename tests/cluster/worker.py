"""One worker process of the cluster tests: ``python -m tests.cluster.worker SPEC_JSON``.

SPEC: url, label, log (a JSON-lines file every worker appends to), status (a JSON
file this worker rewrites every 0.1 s with its health and stats), queues, config
(ServerConfig fields), schedules (App.schedule keyword arguments), gate (true: wrap
the store in a Gate that SIGUSR1 closes and SIGUSR2 opens), and optionally bus
({"url", "channel"}: a RedisBus) and listen (false: the server gets no notifications
from the store, as on a store without LISTEN).

Every line of the log has t (unix time), pid, label, ev and the event's fields, so a
test can order what all the workers did on one clock (they share a host).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import time
from typing import Any

import kiln
import kiln.events
from kiln._server import run_in_new_loop
from tests.cluster.gate import GatedStore
from tests.plugins.parent import exit_with_parent


class Log:
    def __init__(self, path: str, label: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._label = label

    def __call__(self, ev: str, **fields: Any) -> None:
        line = {"t": time.time(), "pid": os.getpid(), "label": self._label, "ev": ev, **fields}
        os.write(self._fd, (json.dumps(line, default=str) + "\n").encode())  # O_APPEND: atomic


def build_app(url: str, log: Log) -> kiln.App:
    app = kiln.App(url)

    @app.job("work", queue="work")
    async def work(job: kiln.Job) -> None:
        """Sleeps ``seconds``, or until the file ``until`` exists (bounded: 120 s)."""
        log("start", job=job.id, attempt=job.attempt)
        try:
            if "until" in job.args:
                for _ in range(6000):
                    if os.path.exists(job.args["until"]):
                        break
                    await asyncio.sleep(0.02)
            else:
                await asyncio.sleep(float(job.args.get("seconds", 0)))
        except asyncio.CancelledError:
            log("cancelled", job=job.id, attempt=job.attempt)
            raise
        log("finish", job=job.id, attempt=job.attempt)

    @app.job("crash", queue="crash")
    def crash(job: kiln.Job) -> None:
        log("start", job=job.id, attempt=job.attempt)
        if job.attempt <= int(job.args["die_attempts"]):
            log("suicide", job=job.id, attempt=job.attempt)
            os.kill(os.getpid(), signal.SIGKILL)
        log("finish", job=job.id, attempt=job.attempt)

    @app.job("tick", queue="ticks")
    async def tick(job: kiln.Job) -> None:
        log("tick", job=job.id, slot=job.metadata.get("kiln.slot"))

    _holds(app, log)
    return app


def _holds(app: kiln.App, log: Log) -> None:
    """Kinds that run until cancelled (tests/cluster/test_cancel.py)."""

    @app.job("hold", queue="hold")
    async def hold(job: kiln.Job) -> None:
        """Runs for a minute unless cancelled (its task is)."""
        log("start", job=job.id, attempt=job.attempt)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            log("stopped", job=job.id, attempt=job.attempt)
            raise
        log("finish", job=job.id, attempt=job.attempt)

    @app.job("hold_sync", queue="hold")
    def hold_sync(job: kiln.Job) -> None:
        """The same as a plain def: it waits on job.cancelled (cooperative)."""
        log("start", job=job.id, attempt=job.attempt)
        if job.cancelled.wait(60):
            log("stopped", job=job.id, attempt=job.attempt)
            return
        log("finish", job=job.id, attempt=job.attempt)


def subscribe(server: kiln.Server, log: Log) -> None:
    def on_event(event: kiln.events.Event) -> None:
        if isinstance(event, kiln.events.LeaderChanged):
            log("leader", server=event.server_id, is_leader=event.is_leader)
        elif isinstance(event, kiln.events.JobRescued):
            log("rescued", job=event.job.id, attempt=event.job.attempt,
                dead=event.dead_server_id, outcome=event.outcome.value)
        elif isinstance(event, kiln.events.Fenced):
            log("fenced", server=event.server_id, reason=event.reason)
        elif isinstance(event, kiln.events.JobCancelled):
            log("cancel_latency", job=event.job.id, latency=event.latency, stuck=event.stuck)
        elif isinstance(event, kiln.events.JobReconciled):
            log("reconciled", job=event.job_id, attempt=event.attempt, action=event.action)
        elif isinstance(event, kiln.events.JobFinished):
            log("result", job=event.job.id, attempt=event.job.attempt,
                outcome=event.outcome.value,
                error=None if event.error is None else repr(event.error)[:300])

    server.events.subscribe(on_event)


class Unlistened:
    """A store whose notifications the server does not use (it polls, as on MySQL)."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.capabilities = dataclasses.replace(
            store.capabilities, listen_notify=False, claim_on_notify=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def report(server: kiln.Server, path: str) -> None:
    tmp = f"{path}.tmp"
    while True:
        health = server.healthy()
        stats = server.stats().as_dict()
        with open(tmp, "w") as f:
            json.dump({"t": time.time(), "id": server.id, "health": health.as_dict(),
                       "stats": stats}, f, default=str)
        os.replace(tmp, path)
        await asyncio.sleep(0.1)


async def main(spec: dict[str, Any]) -> None:
    exit_with_parent()
    log = Log(spec["log"], spec["label"])
    app = build_app(spec["url"], log)
    for schedule in spec.get("schedules", []):
        app.schedule(**schedule)
    store = app.new_store()
    if spec.get("gate"):
        gated = GatedStore(store)

        def cut() -> None:
            gated.cut()
            log("cut")

        def restore() -> None:
            gated.restore()
            log("restored")

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, cut)
        loop.add_signal_handler(signal.SIGUSR2, restore)
        store = gated
    if spec.get("listen") is False:
        store = Unlistened(store)
    bus = None
    if spec.get("bus"):
        bus = kiln.RedisBus(spec["bus"]["url"], spec["bus"]["channel"])
    server = kiln.Server(
        store, app.kinds, spec["queues"], kiln.ServerConfig(**spec["config"]),
        recurring=app.recurring, bus=bus,
    )
    subscribe(server, log)
    run = asyncio.create_task(server.run())
    while server.stats().state != "running":
        if run.done():
            await run
        await asyncio.sleep(0.01)
    log("ready", server=server.id)
    reporter = asyncio.create_task(report(server, spec["status"]))
    try:
        await run
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
    log("stopped", server=server.id)


if __name__ == "__main__":
    run_in_new_loop(main(json.loads(sys.argv[1])))
