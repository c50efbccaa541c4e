"""Flow fixtures: worker processes of tests.flow.app on the test's database, an admin
handle in the test process, and a Redis bus channel of the test's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kiln import Client
from tests.integration.conftest import FAST, ROOT, Admin

REDIS_URL = os.environ.get("KILN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


class FlowAdmin(Admin):
    def client(self) -> Client:
        from tests.flow.app import app

        return Client(self.store, app.kinds)


class FlowWorker:
    def __init__(self, proc: subprocess.Popen[str], server_id: str, notified: bool) -> None:
        self.proc = proc
        self.server_id = server_id
        self.notified = notified  # whether notifications were up when it started

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.proc.kill()

    def stop(self, timeout: float = 20.0) -> dict[str, Any]:
        """SIGTERM, wait, and return the server's final stats."""
        self.terminate()
        out, _err = self.proc.communicate(timeout=timeout)
        for line in out.splitlines():
            if line.startswith("STATS "):
                stats: dict[str, Any] = json.loads(line[len("STATS "):])
                return stats
        raise AssertionError(f"worker printed no stats: {out!r}")


StartFlowWorker = Callable[..., FlowWorker]


@pytest.fixture
def admin(store_url: str) -> Iterator[FlowAdmin]:
    a = FlowAdmin(store_url)
    yield a
    a.close()


@pytest.fixture
def bus_env() -> dict[str, str]:
    """Environment that gives worker processes a RedisBus on a channel of this test."""
    return {"KILN_TEST_BUS": REDIS_URL, "KILN_TEST_BUS_CHANNEL": f"kiln-{uuid.uuid4().hex[:10]}"}


@pytest.fixture
def start_worker(store_url: str) -> Iterator[StartFlowWorker]:
    procs: list[subprocess.Popen[str]] = []

    def start(queue: str = "default=4", env: dict[str, str] | None = None,
              **config: float) -> FlowWorker:
        full_env = dict(os.environ, KILN_DATABASE_URL=store_url, PYTHONPATH=str(ROOT),
                        **(env or {}))
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.flow.run_worker", queue,
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
        return FlowWorker(proc, server_id, json.loads(notified))

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
