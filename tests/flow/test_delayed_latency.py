"""Delayed jobs start on time: within 150 ms of run_at without notifications (the
releaser's 100 ms check) and within 20 ms with them (PostgreSQL LISTEN, or a RedisBus
on SQLite and MySQL), p99 over a few hundred jobs inserted up front, due 10 ms apart,
so that during the measurement only the worker writes.

The spec's figures are p99 goals on a quiet machine; this test runs alone (the suite's
other xdist worker waits, tests/plugins/exclusive.py) but on a shared machine of two
cores, so it holds the median to the goal and the p99 to a ceiling of five times
the goal (a job that waits a poll_interval, the failure this guards against, breaks
both). The measured figures are printed (``-s``) and recorded in docs/idle-cost.md.
"""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

import kiln
from kiln import Client, JobFilter
from tests.plugins.workers import Admin, StartWorker
from tests.support.waits import wait_for_sync

JOBS = 300
GOAL = {"none": 0.150, "notify": 0.020}  # p99 seconds from run_at to handler start


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


@pytest.mark.exclusive  # a bound of tens of ms: no other test may load the CPU meanwhile
@pytest.mark.parametrize("notifications", ["none", "notify"])
def test_delayed_jobs_start_on_time(
    admin: Admin, start_worker: StartWorker, backend: str, notifications: str,
    bus_env: dict[str, str], tmp_path: Path,
) -> None:
    from tests.flow.app import app

    listens = backend.startswith("postgres")
    env: dict[str, str] = {}
    bus = None
    if notifications == "notify" and not listens:
        env = bus_env
        bus = kiln.RedisBus(bus_env["KILN_TEST_BUS"], bus_env["KILN_TEST_BUS_CHANNEL"])
    if notifications == "none" and listens:
        env = {"KILN_TEST_NO_LISTEN": "1"}
    worker = start_worker("default=10", env=env, poll_interval=1.0)
    assert worker.notified is (notifications == "notify")
    client = Client(admin.store, app.kinds, bus=bus)
    log = tmp_path / "starts.log"
    rng = random.Random(5)
    # one insert, due one after another over three seconds (10 ms apart, with jitter)
    batch = [client.build("clock", {"log": str(log)}, delay=0.5 + i * 0.01 + rng.uniform(0, 0.005))
             for i in range(JOBS)]
    ids = admin.portal.run(client.enqueue_many(batch))
    wait_for_sync(lambda: admin.states(ids).get("completed", 0) == JOBS, 30, "all jobs ran")
    worker.stop()

    run_at = {r.id: r.run_at.timestamp()
              for r in admin.portal.run(admin.store.job_list(JobFilter(ids=tuple(ids)), 1000))}
    lags = []
    for line in log.read_text().splitlines():
        job_id, started = line.split()
        lags.append(float(started) - run_at[int(job_id)])
    assert len(lags) == JOBS
    p50, p99 = statistics.median(lags), quantile(lags, 0.99)
    print(f"\n{backend} {notifications}: run_at to start p50 {p50 * 1000:.1f} ms,"
          f" p99 {p99 * 1000:.1f} ms, max {max(lags) * 1000:.1f} ms")
    assert min(lags) > -0.002, "a job started before its run_at"
    assert p50 < GOAL[notifications], (p50, p99)
    assert p99 < 5 * GOAL[notifications], (p50, p99)
