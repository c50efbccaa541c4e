"""Cancel latency: from ``client.cancel`` on a running job to the end of its handler on a
worker in another process, on SQLite, PostgreSQL and MySQL/MariaDB.

Per database and mode a fresh database, one worker process (queue ``hold``), and this
process as the canceller: enqueue one job (alternately ``async def`` and plain ``def``),
wait until the worker logs its start, stamp ``time.time()``, cancel it by id, and wait
until the worker logs the handler's end (same host, same clock). Modes:

- ``notified``: PostgreSQL's own NOTIFY; SQLite and MySQL through a RedisBus (Redis on
  127.0.0.1:6379, or $KILN_BENCH_REDIS_URL);
- ``polled``: SQLite and MySQL without a Bus: the worker looks once per
  heartbeat_interval (``--heartbeat``, default 1 s) while it runs jobs, so the latency
  is spread over that interval (each cancel comes at a random point of it).

Prints one JSON object per database and mode (p50, p99, max in ms), then a table with
each polled p50 as a multiple of the notified one on the same database.

    python -m bench.bench_cancel [--jobs 40] [--heartbeat 1.0] [--databases sqlite,postgres,mysql]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import kiln
from bench.bench_drain import (
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
)

ROOT = Path(__file__).resolve().parents[1]
REDIS = os.environ.get("KILN_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def lines(log: Path, ev: str) -> dict[int, float]:
    found: dict[int, float] = {}
    for raw in log.read_text().splitlines():
        line = json.loads(raw)
        if line["ev"] == ev:
            found[int(line["job"])] = float(line["t"])
    return found


async def wait_line(log: Path, ev: str, job_id: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        at = lines(log, ev).get(job_id)
        if at is not None:
            return at
        await asyncio.sleep(0.002)
    raise TimeoutError(f"no {ev} of job {job_id} within {timeout}s")


async def measure(url: str, mode: str, jobs: int, heartbeat: float, tmp: Path) -> list[float]:
    log = tmp / f"{uuid.uuid4().hex[:8]}.log"
    log.touch()
    bus_spec = None
    if mode == "notified" and not url.startswith("postgresql"):
        bus_spec = {"url": REDIS, "channel": f"kiln-bench-{uuid.uuid4().hex[:8]}"}
    bus = kiln.RedisBus(bus_spec["url"], bus_spec["channel"]) if bus_spec else None
    app = kiln.App(url, bus=bus, known_kinds_only=False)
    await app.amigrate()
    spec = {"url": url, "log": str(log), "heartbeat": heartbeat, "bus": bus_spec}
    worker = subprocess.Popen([sys.executable, "-m", "bench.cancel_worker", json.dumps(spec)],
                              cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    client = app.client()
    latencies: list[float] = []
    try:
        for i in range(jobs + 2):  # two warm-up jobs, not counted
            kind = "hold" if i % 2 == 0 else "hold_sync"
            job_id = await client.enqueue(kind, {}, queue="hold")
            await wait_line(log, "start", job_id, 30)
            # the handler is well inside its wait; polled, at a random point of the
            # worker's look interval (cancelling right after each start would line the
            # cancels up with the looks, which follow the previous job's end)
            await asyncio.sleep(0.05 + (random.uniform(0, heartbeat) if mode == "polled" else 0))
            asked = time.time()
            await client.cancel(kiln.filter_of(ids=[job_id]), actor="bench")
            stopped = await wait_line(log, "stop", job_id, heartbeat + 10)
            if i >= 2:
                latencies.append(stopped - asked)
    finally:
        worker.terminate()
        worker.wait(20)
        await app.aclose()
        if bus is not None:
            await bus.close()
    return latencies


def fresh(db: str, tmp: Path) -> str:
    if db == "sqlite":
        return f"sqlite:///{tmp / f'cancel-{uuid.uuid4().hex[:6]}.db'}"
    if db == "postgres":
        return fresh_database("kiln_cancel")
    return fresh_mysql_database("kiln_cancel")


def drop(db: str, url: str) -> None:
    if db == "postgres":
        drop_database(url)
    elif db == "mysql":
        drop_mysql_database(url)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    results = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for db in args.databases.split(","):
            for mode in ("notified", "polled"):
                if db == "postgres" and mode == "polled":
                    continue  # PostgreSQL always notifies (tests/cluster covers polling)
                url = fresh(db, tmp)
                try:
                    values = await measure(url, mode, args.jobs, args.heartbeat, tmp)
                finally:
                    drop(db, url)
                result = {
                    "database": db, "mode": mode, "jobs": len(values),
                    "heartbeat_s": args.heartbeat if mode == "polled" else None,
                    "p50_ms": round(quantile(values, 0.5) * 1000, 2),
                    "p99_ms": round(quantile(values, 0.99) * 1000, 2),
                    "max_ms": round(max(values) * 1000, 2),
                }
                print(json.dumps(result), flush=True)
                results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--heartbeat", type=float, default=1.0)
    parser.add_argument("--databases", default="sqlite,postgres,mysql")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    notified = {r["database"]: r for r in results if r["mode"] == "notified"}
    print(f"{'database':10} {'mode':9} {'p50 ms':>8} {'p99 ms':>8}  polled/notified p50")
    for r in results:
        base = notified.get(r["database"])
        ratio = f"{r['p50_ms'] / base['p50_ms']:.0f}x" if base and r is not base else ""
        print(f"{r['database']:10} {r['mode']:9} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}  {ratio}")


if __name__ == "__main__":
    main()
