"""Real worker processes sharing one database, for the cluster tests (tests/cluster).

``Cluster`` starts workers (tests/cluster/worker.py) against the test's database with
``FAST`` settings, reads the JSON-lines log they all append to and their status files,
and can cut one worker off from the database: through a loopback TCP proxy on
PostgreSQL, through a gate at the store boundary on SQLite (see tests/cluster/gate.py).
The ``cluster`` fixture (tests/cluster/conftest.py) gives one per test.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kiln.stores import Store, store_from_url
from tests.cluster.proxy import Proxy
from tests.support.config import FAST
from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self, label: str, proc: subprocess.Popen[bytes], status: Path, stderr: Path,
                 proxy: Proxy | None) -> None:
        self.label = label
        self.proc = proc
        self.pid = proc.pid
        self._status = status
        self.stderr = stderr
        self.proxy = proxy
        self.first_id = ""

    def status(self) -> dict[str, Any] | None:
        try:
            return json.loads(self._status.read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return None

    @property
    def id(self) -> str:
        status = self.status()
        return str(status["id"]) if status else self.first_id

    def kill(self) -> float:
        """SIGKILL; returns the time it was sent."""
        at = time.time()
        self.proc.send_signal(signal.SIGKILL)
        return at

    async def cut(self) -> float:
        """Cut this worker off from the database; returns when."""
        at = time.time()
        if self.proxy is not None:
            self.proxy.stall()
        else:
            self.proc.send_signal(signal.SIGUSR1)
        return at

    async def go_away(self) -> float:
        """The database goes away: connections drop and are refused (the gate on SQLite)."""
        at = time.time()
        if self.proxy is not None:
            await self.proxy.close()
        else:
            self.proc.send_signal(signal.SIGUSR1)
        return at

    async def restore(self) -> float:
        at = time.time()
        if self.proxy is not None:
            if self.proxy.closed:
                await self.proxy.reopen()
            self.proxy.resume()
        else:
            self.proc.send_signal(signal.SIGUSR2)
        return at


class Cluster:
    def __init__(self, url: str, tmp: Path) -> None:
        self.url = url
        self.backend = urlsplit(url).scheme
        self.tmp = tmp
        self.log_path = tmp / "cluster.log"
        self.log_path.touch()
        self.workers: list[Worker] = []
        self.proxies: list[Proxy] = []
        self.store: Store = store_from_url(url)

    async def open(self) -> None:
        await self.store.open()
        await self.store.migrate()

    async def start(
        self, label: str, queues: dict[str, int], *, cuttable: bool = False,
        schedules: list[dict[str, Any]] | None = None, wait: bool = True,
        spec: dict[str, Any] | None = None, **config: Any,
    ) -> Worker:
        """Start a worker process; with ``wait``, return once it runs. ``spec`` adds to
        the worker's spec (tests/cluster/worker.py: bus, listen)."""
        url, proxy = self.url, None
        if cuttable and self.backend != "sqlite":
            url, proxy = await self.proxied()
        status = self.tmp / f"{label}.status.json"
        worker_spec = {
            "url": url, "label": label, "log": str(self.log_path), "status": str(status),
            "queues": queues, "config": {**FAST, **config}, "schedules": schedules or [],
            "gate": cuttable and proxy is None, **(spec or {}),
        }
        stderr = self.tmp / f"{label}.stderr"
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.worker", json.dumps(worker_spec)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env,
                cwd=ROOT,
            )
        worker = Worker(label, proc, status, stderr, proxy)
        self.workers.append(worker)
        if wait:
            await self.ready(worker)
        return worker

    async def proxied(self) -> tuple[str, Proxy]:
        """The database's URL through a new loopback proxy (networked databases)."""
        parts = urlsplit(self.url)
        default_port = 3306 if self.backend in ("mysql", "mariadb") else 5432
        proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or default_port)
        await proxy.start()
        self.proxies.append(proxy)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{proxy.port}" if auth else f"127.0.0.1:{proxy.port}"
        return urlunsplit(parts._replace(netloc=netloc)), proxy

    async def ready(self, worker: Worker, timeout: float = 20.0) -> None:
        def started() -> dict[str, Any] | None:
            if worker.proc.poll() is not None:
                raise AssertionError(
                    f"worker {worker.label} exited: {worker.stderr.read_text()[-3000:]}"
                )
            found = self.events("ready", label=worker.label)
            return found[0] if found else None

        line = await wait_for(started, timeout, f"worker {worker.label} to start")
        worker.first_id = str(line["server"])

    def events(self, ev: str | None = None, **match: Any) -> list[dict[str, Any]]:
        """Log lines, in time order, with ``ev`` and every field in ``match``."""
        lines = []
        for raw in self.log_path.read_text().splitlines():
            if not raw.strip():
                continue
            line = json.loads(raw)
            if ev is not None and line["ev"] != ev:
                continue
            if all(line.get(k) == v for k, v in match.items()):
                lines.append(line)
        return sorted(lines, key=lambda line: line["t"])

    def first(self, ev: str, **match: Any) -> dict[str, Any] | None:
        found = self.events(ev, **match)
        return found[0] if found else None

    def worker_of(self, pid: int) -> Worker:
        return next(w for w in self.workers if w.pid == pid)

    async def leader(self, timeout: float = 10.0) -> Worker:
        """The worker that holds the lease, once its leader services run."""
        async def find() -> Worker | None:
            leader_id = await self.store.leader_get()
            for worker in self.workers:
                status = worker.status()
                if worker.proc.poll() is None and status and status["id"] == leader_id \
                        and status["stats"]["leader"]:
                    return worker
            return None

        return await wait_for(find, timeout, "a leader")

    async def close(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.send_signal(signal.SIGKILL)
        for worker in self.workers:
            await asyncio.to_thread(worker.proc.wait, 10)
        for proxy in self.proxies:
            proxy.resume()
            await proxy.close()
        await self.store.close()

    def dump(self) -> str:
        """What the workers wrote, for a failing test's report."""
        parts = [f"--- {w.label} stderr ---\n{w.stderr.read_text()[-2000:]}" for w in self.workers]
        return "\n".join([*parts, "--- log ---", self.log_path.read_text()[-6000:]])
