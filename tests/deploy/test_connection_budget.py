"""The connection budget of the operator's guide, measured on PostgreSQL: a worker
process holds at most max_conns (8) pool connections plus one for LISTEN, 9 in all,
however busy; a handler that enqueues through the App opens the App's store beside it.

A real ``kiln worker`` process with 40 slots drains jobs that checkpoint three times
each, while the test counts the process's established TCP connections to the
database's port (its sockets, from /proc), every 10 ms.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from kiln._model._job import FINISHED_STATES, JobFilter, NewJob
from kiln.stores import store_from_url
from tests.plugins.databases import postgres_schema_url
from tests.support.deploy import ROOT

MAX_CONNS, LISTEN = 8, 1
pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from postgres_schema_url()


def database_connections(pid: int, port: int) -> int:
    """Established TCP connections of process ``pid`` to ``port`` on any address."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and remote_port == port and fields[9] in inodes:
                count += 1
    return count


async def drain(url: str, jobs: list[NewJob], proc: subprocess.Popen[str],
                port: int) -> int:
    """Enqueue ``jobs``, wait until every job in the queue finished; the peak count."""
    store = store_from_url(url)
    await store.open()
    peak = 0
    try:
        await store.job_insert_many(jobs)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, "the worker exited"
            peak = max(peak, database_connections(proc.pid, port))
            rows = await store.job_list(JobFilter(queue="budget"), limit=1000)
            if rows and all(r.state in FINISHED_STATES for r in rows):
                return peak
            time.sleep(0.01)
        raise AssertionError("the jobs did not finish in 60 s")
    finally:
        await store.close()


async def test_a_worker_process_stays_within_nine_connections(pg_url: str) -> None:
    port = urlsplit(pg_url).port or 5432
    setup = store_from_url(pg_url)
    await setup.open()
    await setup.migrate()
    await setup.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update(KILN_DATABASE_URL=pg_url, KILN_POLL_INTERVAL="0.2", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kiln.cli", "worker", "tests.deploy.budget_app:app",
         "--queue", "budget=40", "--log-level", "error"],
        cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )
    try:
        checkpoints = [NewJob("budget.checkpoint", {"n": i}, queue="budget")
                       for i in range(400)]
        server_only = await drain(pg_url, checkpoints, proc, port)
        fanouts = [NewJob("budget.fanout", {"n": i}, queue="budget") for i in range(300)]
        with_client = await drain(pg_url, fanouts, proc, port)
    finally:
        proc.terminate()
        output = proc.communicate(timeout=30)[0]
    print(f"peak database connections of one worker process: {server_only} with the "
          f"server's store alone, {with_client} when handlers enqueue through the App")
    assert proc.returncode == 0, output
    assert MAX_CONNS // 2 <= server_only <= MAX_CONNS + LISTEN
    # the App's client store: its own pool beside the server's (no LISTEN of its own)
    assert server_only < with_client <= 2 * MAX_CONNS + LISTEN
