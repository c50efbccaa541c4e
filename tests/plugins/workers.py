"""Real worker processes for tests, and sync access to the test database.

A suite names the app its workers run (``module:attribute``); ``start_worker`` starts
``python -m tests.plugins.run_worker APP QUEUE CONFIG`` on the test's database and
waits for its READY line. Every process is killed at the end of the test.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kiln import App, Client, JobFilter, JobRow
from tests.support.config import FAST

ROOT = Path(__file__).resolve().parents[2]
def load_app(spec: str) -> App:
    module, attribute = spec.split(":")
    app: App = getattr(importlib.import_module(module), attribute)
    return app


class Worker:
    def __init__(self, proc: subprocess.Popen[str], server_id: str, notified: bool) -> None:
        self.proc = proc
        self.server_id = server_id
        self.notified = notified  # whether notifications were up when it started

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 20.0) -> dict[str, Any]:
        """SIGTERM, wait, and return the server's final stats."""
        self.terminate()
        out, _err = self.proc.communicate(timeout=timeout)
        for line in out.splitlines():
            if line.startswith("STATS "):
                stats: dict[str, Any] = json.loads(line[len("STATS "):])
                return stats
        raise AssertionError(f"worker printed no stats: {out!r}")


StartWorker = Callable[..., Worker]


def worker_starter(store_url: str, app_spec: str) -> Iterator[StartWorker]:
    """Body of a ``start_worker`` fixture: yields start(queue, env=None, **config)."""
    procs: list[subprocess.Popen[str]] = []

    def start(queue: str = "default=4", env: dict[str, str] | None = None,
              **config: float) -> Worker:
        full_env = dict(os.environ, KILN_DATABASE_URL=store_url, PYTHONPATH=str(ROOT),
                        **(env or {}))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.plugins.run_worker", app_spec, queue,
             json.dumps({**FAST, **config})],
            stdout=subprocess.PIPE, stderr=None, text=True, env=full_env, cwd=ROOT,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY "):
            proc.kill()
            raise AssertionError(f"worker did not start: {line!r}")
        _ready, server_id, notified = line.split()
        return Worker(proc, server_id, json.loads(notified))

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


class Admin:
    """Sync access to the test database from the test process, via one open store.

    Enqueues through a client that knows the kinds of the workers' app, hence their
    options (max_attempts, backoff, timeout...).
    """

    def __init__(self, url: str, app_spec: str) -> None:
        from kiln._aio._portal import Portal
        from kiln.stores import store_from_url

        self.app_spec = app_spec
        self.portal = Portal("kiln-test-admin")
        self.store = store_from_url(url)
        self.portal.run(self.store.open())
        self.portal.run(self.store.migrate())

    def client(self) -> Client:
        return Client(self.store, load_app(self.app_spec).kinds)

    def enqueue(self, kind: str, args: object = None, **options: Any) -> int:
        return self.portal.run(self.client().enqueue(kind, args, **options))

    def enqueue_many(self, kind: str, args_list: list[object], **options: Any) -> list[int]:
        client = self.client()
        jobs = [client.build(kind, a, **options) for a in args_list]
        return [int(i) for i in self.portal.run(client.enqueue_many(jobs))]

    def job(self, job_id: int) -> JobRow:
        row = self.portal.run(self.store.job_get(job_id))
        assert row is not None, f"job {job_id} disappeared"
        return row

    def states(self, ids: Sequence[int]) -> dict[str, int]:
        rows = self.portal.run(self.store.job_list(JobFilter(ids=tuple(ids)), limit=1000))
        out: dict[str, int] = {}
        for row in rows:
            out[row.state.value] = out.get(row.state.value, 0) + 1
        return out

    def close(self) -> None:
        self.portal.run(self.store.close())
        self.portal.close()
