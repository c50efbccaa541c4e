"""A PgBouncer of the test's own on loopback, in transaction mode by default.

``PgBouncer`` writes a temporary ini and userlist (trust auth, every database forwarded
to the test PostgreSQL server), starts Debian's ``/usr/sbin/pgbouncer`` on a free port,
and stops it. Its admin console (``SHOW POOLS``, ``SHOW SERVERS``) is the ``pgbouncer``
database. Without the binary, ``pgbouncer_or_skip`` skips the test locally and fails it
with CI=true (``unavailable``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.plugins.databases import POSTGRES_URL, unavailable

BINARY = os.environ.get("KILN_TEST_PGBOUNCER", "/usr/sbin/pgbouncer")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgBouncer:
    """One PgBouncer process; ``url(db)`` is a client URL through it."""

    def __init__(self, *, mode: str = "transaction", pool_size: int = 4,
                 max_prepared_statements: int = 0) -> None:
        # a directory of its own: PgBouncer refuses to run as root, and the user it
        # switches to (``-u nobody``) must read the ini and write the log
        directory = self.dir = Path(tempfile.mkdtemp(prefix="kiln-pgbouncer-"))
        directory.chmod(0o777)
        self.mode = mode
        self.pool_size = pool_size
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        upstream = urlsplit(POSTGRES_URL)
        self._upstream_host = upstream.hostname or "127.0.0.1"
        self._upstream_port = upstream.port or 5432
        self.user = upstream.username or "postgres"
        (directory / "userlist.txt").write_text(f'"{self.user}" ""\n')
        extra = (f"max_prepared_statements = {max_prepared_statements}\n"
                 if max_prepared_statements else "")
        (directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={self._upstream_host} port={self._upstream_port}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\n"
            f"unix_socket_dir =\nauth_type = trust\nauth_file = {directory}/userlist.txt\n"
            f"admin_users = {self.user}\n"
            f"pool_mode = {mode}\ndefault_pool_size = {pool_size}\nmin_pool_size = 0\n"
            "reserve_pool_size = 0\nmax_client_conn = 2000\nserver_reset_query =\n"
            f"logfile = {directory}/pgbouncer.log\npidfile = {directory}/pgbouncer.pid\n"
            + extra
        )

    def url(self, database: str | None = None, **params: str) -> str:
        base = urlsplit(POSTGRES_URL)
        db = database or base.path.lstrip("/")
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return urlunsplit(("postgresql", f"{self.user}@127.0.0.1:{self.port}", f"/{db}",
                           query, ""))

    def start(self) -> None:
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        self.proc = subprocess.Popen(
            [BINARY, *user, str(self.dir / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    log = (self.dir / "pgbouncer.log")
                    text = log.read_text() if log.exists() else ""
                    raise RuntimeError(f"pgbouncer exited: {text[-2000:]}") from None
                time.sleep(0.02)
        raise RuntimeError("pgbouncer did not listen within 10 s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)  # immediate shutdown
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        (self.dir / "pgbouncer.pid").unlink(missing_ok=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def admin(self, command: str) -> list[dict[str, Any]]:
        """Rows of an admin console command (SHOW POOLS, SHOW SERVERS ...)."""
        import psycopg

        with psycopg.connect(self.url("pgbouncer"), autocommit=True,
                             prepare_threshold=None) as conn:
            cur = conn.execute(command)
            names = [d.name for d in cur.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def pgbouncer_or_skip() -> None:
    if shutil.which(BINARY) is None:
        unavailable("pgbouncer", f"{BINARY} is not installed")


def running(**options: Any) -> Iterator[PgBouncer]:
    pgbouncer_or_skip()
    bouncer = PgBouncer(**options)
    bouncer.start()
    try:
        yield bouncer
    finally:
        bouncer.stop()
        shutil.rmtree(bouncer.dir, ignore_errors=True)


def fresh_database() -> Iterator[str]:
    """A database of its own on the test server (PgBouncer refuses the test suite's
    ``options=-csearch_path`` startup parameter): its name, dropped after."""
    import psycopg

    name = f"kiln_t_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.OperationalError as exc:
        unavailable("postgres", str(exc))
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


_SHARED: list[PgBouncer] = []


def shared() -> PgBouncer:
    """One PgBouncer in transaction mode for the whole run (KILN_TEST_POSTGRES_VIA=
    pgbouncer runs the PostgreSQL tests through it), stopped when the run ends."""
    if not _SHARED:
        pgbouncer_or_skip()
        bouncer = PgBouncer(pool_size=int(os.environ.get("KILN_TEST_PGBOUNCER_POOL", "8")))
        bouncer.start()
        atexit.register(bouncer.stop)
        _SHARED.append(bouncer)
    return _SHARED[0]


@pytest.fixture
def pgbouncer() -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode (pool of 4 server connections per database)."""
    yield from running()


@pytest.fixture
def pg_database() -> Iterator[str]:
    yield from fresh_database()
