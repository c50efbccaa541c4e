"""The worker processes of a chaos run and the faults the harness does to them.

Each worker is a process group of its own (``start_new_session``), so a finalizer can
kill all of it; on a networked database each reaches it through a loopback proxy of
its own (tests/cluster/proxy.py), which a cut stalls or closes. A database outage
closes every worker's proxy at once; a restart (``db``) restarts a private server.
Every fault is written to the run's ledger as a ``fault`` line: type, target pid
(none: every worker), when it began and when it was lifted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from tests.cluster.proxy import Proxy
from tests.cluster.worker import Log

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0


class Restartable(Protocol):
    async def restart(self, down_for: float, crash: bool) -> None: ...


class Worker:
    def __init__(self, label: str, proc: subprocess.Popen[bytes], proxy: Proxy | None,
                 stderr: Path) -> None:
        self.label = label
        self.proc = proc
        self.pid = proc.pid
        self.proxy = proxy
        self.stderr = stderr
        self.busy = False  # a stop or a cut is being done to it
        self.ready = False  # said it runs: a fault may target it
        self.ended_by: str | None = None  # the signal that ended it, if the harness sent one

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.proc.returncode is not None:
            return  # reaped: its pid may belong to someone else now
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.ended_by = self.ended_by or sig.name
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)


class Cluster:
    def __init__(self, url: str, tmp: Path, concurrency: int, config: dict[str, Any]) -> None:
        self.url = url
        self.networked = urlsplit(url).scheme != "sqlite"
        self.tmp = tmp
        self.ledger = tmp / "ledger.jsonl"
        self.ledger.touch()
        self.log = Log(str(self.ledger), "harness")
        self.concurrency = concurrency
        self.config = config
        self.workers: list[Worker] = []
        self.db_down = asyncio.Event()  # set while the database is cut off or restarting
        self._count = 0

    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.alive()]

    def crashed(self) -> list[str]:
        """Workers that ran and then exited with no signal from the harness."""
        return [f"worker {w.label} (pid {w.pid}) exited by itself with status "
                f"{w.proc.returncode}: {w.stderr.read_text()[-1500:]}"
                for w in self.workers if w.ready and not w.alive() and w.ended_by is None]

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for raw in self.ledger.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line cut by a kill mid-write
                out.append(json.loads(raw))
        return out

    async def start(self, tries: int = 6) -> Worker:
        """A new worker, once it runs; one that cannot reach the database at its start (a
        restart or an outage in the way: a server exits when its store cannot open) is
        started again."""
        for attempt in range(1, tries + 1):
            while self.db_down.is_set():
                await asyncio.sleep(0.05)
            try:
                return await self._start_one()
            except AssertionError as exc:
                self.log("start_failed", error=str(exc)[-500:])
                if attempt == tries:
                    raise
                await asyncio.sleep(0.5)
        raise AssertionError("unreachable")

    async def _start_one(self) -> Worker:
        self._count += 1
        label = f"w{self._count}"
        url, proxy = self.url, None
        if self.networked:
            url, proxy = await self._proxied()
        spec = {"url": url, "label": label, "log": str(self.ledger),
                "concurrency": self.concurrency, "config": self.config}
        stderr = self.tmp / f"{label}.stderr"
        with stderr.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.worker", json.dumps(spec)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT,
                env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True,
            )
        worker = Worker(label, proc, proxy, stderr)
        self.workers.append(worker)
        try:
            await self._ready(worker)
        except BaseException:
            worker.signal(signal.SIGKILL)
            raise
        worker.ready = True
        return worker

    async def _proxied(self) -> tuple[str, Proxy]:
        parts = urlsplit(self.url)
        proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
        await proxy.start()
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{proxy.port}" if auth else f"127.0.0.1:{proxy.port}"
        return urlunsplit(parts._replace(netloc=netloc)), proxy

    async def _ready(self, worker: Worker) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not any(ln["ev"] == "ready" and ln["label"] == worker.label
                      for ln in self.lines()):
            if not worker.alive():
                raise AssertionError(f"worker {worker.label} exited: "
                                     f"{worker.stderr.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {worker.label} not ready in {READY_TIMEOUT}s")
            await asyncio.sleep(0.05)

    def leader(self) -> Worker | None:
        """The worker that last said it leads, if it is alive."""
        state: dict[int, bool] = {}
        for ln in self.lines():
            if ln["ev"] == "leader":
                state[ln["pid"]] = bool(ln["is_leader"])
        for w in self.alive():
            if state.get(w.pid):
                return w
        return None

    def fault(self, type_: str, target: Worker | None, began: float,
              until: float | None = None, **extra: Any) -> None:
        """Log a fault; ``until``: when it began to be lifted (default: now)."""
        self.log("fault", type=type_, target=target.pid if target else None, began=began,
                 until=time.time() if until is None else until, **extra)

    async def kill(self, w: Worker) -> None:
        w.busy = True  # on its way out: no second fault, no second replacement
        began = time.time()
        w.signal(signal.SIGKILL)
        await asyncio.to_thread(w.proc.wait, 10)
        self.fault("kill", w, began)
        await self.start()

    async def term(self, w: Worker, grace: float) -> None:
        """SIGTERM; a worker that is still there after ``grace`` is killed, and logged."""
        w.busy = True
        began = time.time()
        w.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.to_thread(w.proc.wait), grace)
        except TimeoutError:
            self.log("term_hung", target=w.pid, after=grace)
            w.signal(signal.SIGKILL)
            await asyncio.to_thread(w.proc.wait, 10)
        self.fault("term", w, began)
        await self.start()

    async def stop(self, w: Worker, seconds: float) -> None:
        w.busy = True
        began = time.time()
        w.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            woke = time.time()  # before SIGCONT: the process may log before we do
            w.signal(signal.SIGCONT)
            w.busy = False
            self.fault("stop", w, began, woke)

    async def cut(self, w: Worker, seconds: float, drop: bool) -> None:
        """Stall (packets held, delivered late) or drop (connections closed, refused) the
        worker's connections to the database for ``seconds``."""
        assert w.proxy is not None
        w.busy = True
        began = time.time()
        try:
            if drop:
                await w.proxy.close()
            else:
                w.proxy.stall()
            await asyncio.sleep(seconds)
        finally:
            lifted = time.time()
            await self._restore(w.proxy)
            w.busy = False
            self.fault("cut", w, began, lifted, drop=drop)

    async def outage(self, seconds: float) -> None:
        """Every worker loses the database: all connections drop, new ones are refused."""
        began = time.time()
        self.db_down.set()
        proxies = [w.proxy for w in self.workers if w.proxy is not None]
        try:
            for p in proxies:
                await p.close()
            await asyncio.sleep(seconds)
        finally:
            lifted = time.time()
            self.db_down.clear()
            for p in proxies:
                await self._restore(p)
            self.fault("db_outage", None, began, lifted)

    async def restart(self, db: Restartable, down_for: float, crash: bool) -> None:
        began = time.time()
        self.db_down.set()
        try:
            await db.restart(down_for, crash)
        finally:
            self.db_down.clear()
            self.fault("db_restart", None, began, crash=crash)

    async def _restore(self, proxy: Proxy) -> None:
        if proxy.closed:
            await proxy.reopen()
        proxy.resume()

    async def stop_all(self, timeout: float) -> None:
        """SIGTERM every worker (waking stopped ones), SIGKILL what is left after timeout."""
        for w in self.alive():
            w.signal(signal.SIGCONT)
            w.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await self.close()

    async def close(self) -> None:
        """Kill every worker's process group and close the proxies (idempotent)."""
        for w in self.workers:
            w.signal(signal.SIGCONT)
            w.signal(signal.SIGKILL)
        for w in self.workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(w.proc.wait, 10)
            if w.proxy is not None:
                w.proxy.resume()
                await w.proxy.close()
