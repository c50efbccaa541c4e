"""``kiln worker --health-port``: 503 while the database is gone, 200 once it is back,
under a new registration.

PostgreSQL and MySQL: the worker connects through a loopback proxy that drops every connection
and refuses new ones. SQLite: the test holds the database's write lock (BEGIN
EXCLUSIVE), so the worker's heartbeats wait on the lock as they would on a dead
server, while the health endpoint keeps answering from the worker's event loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from tests.cluster.proxy import Proxy
from tests.support.cluster import ROOT, Cluster
from tests.support.config import FAST
from tests.support.waits import wait_for


async def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                     .encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def flags(config: dict[str, Any]) -> list[str]:
    return [f"--{k.replace('_', '-')}={v}" for k, v in config.items()]


class Lock:
    """Holds SQLite's write lock from the test process."""

    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(
            path, isolation_level=None, timeout=10, check_same_thread=False
        )

    def take(self) -> None:
        self._conn.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        self._conn.execute("ROLLBACK")
        self._conn.close()


async def test_health_endpoint_follows_the_database(cluster: Cluster) -> None:
    c = cluster
    url, proxy = c.url, None
    if c.backend != "sqlite":
        url, proxy = await c.proxied()
    stderr = c.tmp / "cli.stderr"
    env = dict(os.environ, PYTHONPATH=str(ROOT), KILN_CLUSTER_LOG=str(c.log_path))
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kiln.cli", "worker", "tests.cluster.app:app",
             f"--database-url={url}", "--queue=work=1", "--health-port=0", *flags(FAST)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=ROOT,
        )
    try:
        await check_health(c, proc, stderr, proxy)
    finally:
        proc.kill()
        await asyncio.to_thread(proc.wait, 10)


async def check_health(
    c: Cluster, proc: subprocess.Popen[bytes], stderr: Any, proxy: Proxy | None
) -> None:
    def port() -> int | None:
        assert proc.poll() is None, stderr.read_text()
        found = re.search(r"health on http://127\.0\.0\.1:(\d+)/healthz", stderr.read_text())
        return int(found.group(1)) if found else None

    health_port = await wait_for(port, 20, "the health endpoint")

    async def answers(code: int) -> dict[str, Any] | None:
        status, body = await get(health_port, "/healthz")
        return body if status == code else None

    await wait_for(lambda: answers(200), 20, "200 from /healthz")
    status, stats = await get(health_port, "/stats")
    assert status == 200 and stats["state"] == "running"
    first_id = stats["server_id"]

    lock = None
    gone_at = time.monotonic()
    if proxy is not None:
        await proxy.close()
    else:
        lock = Lock(urlsplit(c.url).path[1:])
        await asyncio.to_thread(lock.take)
    body = await wait_for(lambda: answers(503), 5, "503 once the database is gone")
    unhealthy_after = time.monotonic() - gone_at
    assert body["healthy"] is False and body["reasons"]
    assert body["heartbeat_stale"] or body["fenced"]
    body = await wait_for(lambda: answers(503), 5, "a 503 that says it is fenced")
    fenced = await wait_for(
        lambda: _fenced(health_port), 5, "the worker to fence itself off"
    )
    assert any(r.startswith("fenced") for r in fenced["reasons"])

    back_at = time.monotonic()
    if proxy is not None:
        await proxy.reopen()
    else:
        assert lock is not None
        await asyncio.to_thread(lock.release)
    await wait_for(lambda: answers(200), 15, "200 once the database is back")
    healthy_after = time.monotonic() - back_at
    status, stats = await get(health_port, "/stats")
    assert status == 200 and stats["server_id"] != first_id  # rejoined under a new id
    assert stats["fenced"] == 1 and stats["heartbeats_failed"] >= 1
    registered = {s.id for s in await c.store.server_list()}
    assert stats["server_id"] in registered
    print(f"[{c.backend}] /healthz 503 {unhealthy_after:.2f}s after the database went away, "
          f"200 again {healthy_after:.2f}s after it came back (new id {stats['server_id']})")


async def _fenced(port: int) -> dict[str, Any] | None:
    status, body = await get(port, "/healthz")
    return body if status == 503 and body["fenced"] else None
