"""Fixtures that start real worker processes against the test's database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kiln import Client

ROOT = Path(__file__).resolve().parents[2]
FAST = {
    "poll_interval": 0.2,
    "heartbeat_interval": 0.2,
    "kill_grace": 0.2,
    "dead_after": 6.0,
    "leader_ttl": 1.0,
    "shutdown_timeout": 1.0,
}


class Worker:
    def __init__(self, proc: subprocess.Popen[str], server_id: str) -> None:
        self.proc = proc
        self.server_id = server_id

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout)


StartWorker = Callable[..., Worker]


@pytest.fixture
def start_worker(store_url: str) -> Iterator[StartWorker]:
    procs: list[subprocess.Popen[str]] = []

    def start(
        queue: str = "default=4", app: str = "tests.integration.app:app", **config: float
    ) -> Worker:
        env = dict(os.environ, KILN_DATABASE_URL=store_url, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.run_worker", app, queue,
             json.dumps({**FAST, **config})],
            stdout=subprocess.PIPE, stderr=None, text=True, env=env, cwd=ROOT,
        )
        procs.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY "):
            proc.kill()
            raise AssertionError(f"worker did not start: {line!r}")
        return Worker(proc, line.split()[1])

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll ``condition`` until true; return the seconds it took."""
    began = time.monotonic()
    while not condition():
        if time.monotonic() - began > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)
    return time.monotonic() - began


class Admin:
    """Sync access to the test database from the test process, via one open store."""

    def __init__(self, url: str) -> None:
        from kiln._portal import Portal
        from kiln.stores import store_from_url

        self.portal = Portal("kiln-test-admin")
        self.store = store_from_url(url)
        self.portal.run(self.store.open())
        self.portal.run(self.store.migrate())

    def enqueue(self, kind: str, args: object = None, **options: object) -> int:
        return self.portal.run(self.client().enqueue(kind, args, **options))

    def enqueue_many(self, kind: str, args_list: list[object], **options: object) -> list[int]:
        client = self.client()
        jobs = [client.build(kind, a, **options) for a in args_list]
        return self.portal.run(client.insert_many(jobs))

    def client(self) -> Client:
        """A client that knows the kinds of the workers' app, hence their options."""
        from tests.integration.app import app

        return Client(self.store, app.kinds)

    def job(self, job_id: int):  # type: ignore[no-untyped-def]
        row = self.portal.run(self.store.job_get(job_id))
        assert row is not None, f"job {job_id} disappeared"
        return row

    def states(self, ids: list[int]) -> dict[str, int]:
        from kiln import JobFilter

        rows = self.portal.run(self.store.job_list(JobFilter(ids=tuple(ids)), limit=1000))
        out: dict[str, int] = {}
        for row in rows:
            out[row.state.value] = out.get(row.state.value, 0) + 1
        return out

    def close(self) -> None:
        self.portal.run(self.store.close())
        self.portal.close()


@pytest.fixture
def admin(store_url: str) -> Iterator[Admin]:
    a = Admin(store_url)
    yield a
    a.close()
