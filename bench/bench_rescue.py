"""Rescue delay with the default ServerConfig: how long a killed worker's job waits.

The operator's guide: a dead server's jobs start again after dead_after and within one
more heartbeat_interval, "roughly 60 to 70 seconds" with the defaults; a dead leader
adds about leader_ttl, since the new leader waits dead_after + heartbeat_interval
before its first rescue. This runs real worker processes (tests/cluster's harness) on
PostgreSQL with the defaults (poll_interval 1s, heartbeat_interval 5s, dead_after 60s,
leader_ttl 15s), SIGKILLs a worker mid-job and times, on one host clock, the kill to
the job's second attempt starting on another worker. Two setups run side by side, each
on a database of its own: a worker that is not the leader, and the leader itself.
Prints one JSON object per setup. Takes about 90 seconds.

    python -m bench.bench_rescue
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from bench.bench_drain import drop_database, fresh_database
from kiln._client._client import Client
from kiln._server._config import DEFAULTS
from tests.cluster.conftest import Cluster

FIELDS = ("poll_interval", "heartbeat_interval", "dead_after", "leader_ttl",
          "shutdown_timeout", "kill_grace")
CONFIG = {name: DEFAULTS[name] for name in FIELDS}
BUDGET = 2 * DEFAULTS["leader_ttl"] + DEFAULTS["dead_after"] + 4 * DEFAULTS["heartbeat_interval"]


async def _job_on(c: Cluster, pid: int) -> int:
    """Enqueue long jobs until one starts on ``pid``; returns its id."""
    for _ in range(6):
        job_id = await Client(c.store).enqueue("work", {"seconds": 300.0}, queue="work")
        line = await c.wait_for(lambda j=job_id: c.first("start", job=j), 15, "a start")
        if line["pid"] == pid:
            return job_id
    raise AssertionError("no job started on the worker to kill")


async def killed_worker(c: Cluster, leader_dies: bool) -> dict[str, Any]:
    leader = await c.start("leader", {"other": 1}, **CONFIG) if not leader_dies else None
    a = await c.start("a", {"work": 1}, **CONFIG)
    if leader_dies:
        assert (await c.leader(timeout=30)) is a
    else:
        assert (await c.leader(timeout=30)) is leader
    b = await c.start("b", {"work": 8}, **CONFIG)  # room beside any long job it took
    job_id = await _job_on(c, a.pid)
    killed_at = a.kill()
    again = await c.wait_for(lambda: c.first("start", job=job_id, attempt=2), BUDGET,
                             "the second attempt")
    rescued = c.first("rescued", job=job_id)
    result: dict[str, Any] = {
        "setup": "leader killed" if leader_dies else "worker killed (not the leader)",
        "config": CONFIG,
        "restarted_after_s": round(again["t"] - killed_at, 2),
        "rescued_after_s": round(rescued["t"] - killed_at, 2) if rescued else None,
        "restarted_on": "the other worker" if again["pid"] == b.pid else "?",
    }
    if leader_dies:
        gained = c.first("leader", pid=b.pid, is_leader=True)
        result["new_leader_after_s"] = round(gained["t"] - killed_at, 2) if gained else None
    return result


async def measure(leader_dies: bool) -> dict[str, Any]:
    url = fresh_database("kiln_rescue")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            c = Cluster(url, Path(tmp))
            await c.open()
            try:
                return await killed_worker(c, leader_dies)
            finally:
                await c.close()
    finally:
        drop_database(url)


async def main() -> None:
    for result in await asyncio.gather(measure(False), measure(True)):
        print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
