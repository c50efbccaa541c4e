"""A private PostgreSQL or MariaDB server that a chaos run may really restart.

The shared servers on 5432/3306 serve every test on this machine at once: restarting
one would fail whatever else is running. So a run with real restarts starts a server
of its own in a temporary directory, on a free loopback port, as the service's user
(PostgreSQL refuses to run as root), restarts that one (a crash, SIGKILL or
``pg_ctl -m immediate``, or a clean stop, drawn at random), and always stops it and
removes its files at the end, whatever happened in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support.net import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")
MARIADBD = "/usr/sbin/mariadbd"
START_TIMEOUT = 60.0


def available(backend: str) -> str:
    """Why a private server of ``backend`` cannot run here ("" if it can)."""
    if os.geteuid() != 0:
        return "a private server is started as the service's user, which needs root"
    need = [PG_BIN / "initdb", PG_BIN / "pg_ctl"] if backend == "postgres" else [
        Path(MARIADBD), Path(shutil.which("mariadb-install-db") or "/nonexistent")]
    missing = [str(p) for p in need if not p.exists()]
    return f"missing {', '.join(missing)}" if missing else ""



def _owned_dir(prefix: str, user: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    shutil.chown(path, user, user)
    return path


async def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def _run(cmd: list[str], timeout: float = START_TIMEOUT) -> None:
    subprocess.run(cmd, check=True, timeout=timeout, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


class PostgresServer:
    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.restarts: list[str] = []

    def _ctl(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(self.data),
                *args]

    async def start(self) -> None:
        if not self.data.exists():
            await asyncio.to_thread(_run, [
                "runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(self.data),
                "-A", "trust", "-U", "postgres", "--no-sync"])
        opts = (f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
                " -c max_connections=200")
        await asyncio.to_thread(_run, self._ctl("-o", opts, "-l", str(self.data / "log"),
                                                "-w", "-t", "60", "start"))
        await _wait_port(self.port, START_TIMEOUT)

    async def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            await asyncio.to_thread(_run, self._ctl("-m", mode, "-w", "-t", "60", "stop"))

    async def restart(self, down_for: float, crash: bool) -> None:
        mode = "immediate" if crash else "fast"  # immediate: a crash, with recovery
        self.restarts.append(mode)
        await self.stop(mode)
        try:
            await asyncio.sleep(down_for)
        finally:
            await self.start()


class MariaServer:
    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        self.port = free_port()
        self.url = f"mysql://root@127.0.0.1:{self.port}/mysql"
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts: list[str] = []

    async def start(self) -> None:
        if not self.data.exists():
            self.data.mkdir()
            shutil.chown(self.data, "mysql", "mysql")
            await asyncio.to_thread(_run, [
                "mariadb-install-db", "--no-defaults", f"--datadir={self.data}",
                "--user=mysql", "--auth-root-authentication-method=normal",
                "--skip-test-db"])
        log = (self.data.parent / "mariadbd.log").open("ab")
        self.proc = subprocess.Popen(
            [MARIADBD, "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
             "--bind-address=127.0.0.1", f"--socket={self.data.parent / 'sock'}",
             f"--pid-file={self.data.parent / 'pid'}", "--user=mysql", "--skip-log-bin",
             "--innodb-buffer-pool-size=64M", "--innodb-flush-log-at-trx-commit=2",
             "--max-connections=300", "--skip-name-resolve"],
            stdout=log, stderr=log, start_new_session=True,
        )
        log.close()
        await _wait_port(self.port, START_TIMEOUT)

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            await asyncio.to_thread(proc.wait, 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait, 10)

    async def restart(self, down_for: float, crash: bool) -> None:
        sig = signal.SIGKILL if crash else signal.SIGTERM
        self.restarts.append(sig.name)
        await self.stop(sig)
        try:
            await asyncio.sleep(down_for)
        finally:
            await self.start()


@contextlib.asynccontextmanager
async def private_server(backend: str) -> AsyncIterator[PostgresServer | MariaServer]:
    """A running private server of ``backend``; stopped and removed on exit."""
    user = "postgres" if backend == "postgres" else "mysql"
    root = _owned_dir("kiln-chaos-db-", user)
    server = PostgresServer(root) if backend == "postgres" else MariaServer(root)
    try:
        await server.start()
        yield server
    finally:
        with contextlib.suppress(Exception):
            await (server.stop("immediate") if isinstance(server, PostgresServer)
                   else server.stop(signal.SIGKILL))
        shutil.rmtree(root, ignore_errors=True)
        if os.path.exists(root):  # pragma: no cover - rmtree ignored an error
            subprocess.run(["rm", "-rf", str(root)], check=False)
