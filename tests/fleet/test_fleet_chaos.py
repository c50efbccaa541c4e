"""The fleet run (issue 41 item 6): 16 worker processes and 4 producers with a pool of
2 connections each, through a PgBouncer of the test's own in transaction mode
(pooler=transaction, no LISTEN: they poll), take SIGKILL, SIGTERM, SIGSTOP and network
cuts, and PgBouncer itself is restarted once; the chaos ledger (tests/chaos/ledger.py)
must then account for every job: none lost, none stuck, none run twice at once.
Meanwhile PostgreSQL never sees more connections to the run's database than
PgBouncer's pool, while PgBouncer serves many times that many clients.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import psycopg
import pytest

from tests.chaos.harness import Spec, run
from tests.chaos.test_chaos import check
from tests.plugins.databases import POSTGRES_URL
from tests.plugins.pgbouncer import PgBouncer

POOL = 4  # PgBouncer's default_pool_size: what PostgreSQL may see, whatever the fleet
WORKERS, PRODUCERS, CONNS = 16, 4, 2
# the chaos suite's timings, slowed down for 16 processes sharing 4 server connections
# on 2 loaded cores: with a heartbeat every 0.25 s (fenced after 0.75 s unconfirmed)
# and a release check every 0.1 s from each of them, a heartbeat queued behind some 300
# statements a second at PgBouncer fenced servers again and again, and no leader held
# its lease long enough to rescue (a run at load 21). dead_after > 3*0.5 + 0.2 + 5.
FLEET_CONFIG = {"heartbeat_interval": 0.5, "dead_after": 8.0, "leader_ttl": 2.0,
                "poll_interval": 0.5, "release_interval": 0.5}


class Restarting:
    """tests.chaos.cluster.Restartable: a db_restart restarts PgBouncer."""

    def __init__(self, bouncer: PgBouncer) -> None:
        self.bouncer = bouncer
        self.restarts = 0

    async def restart(self, down_for: float, crash: bool) -> None:
        await asyncio.to_thread(self.bouncer.stop)
        await asyncio.sleep(down_for)
        await asyncio.to_thread(self.bouncer.start)
        self.restarts += 1


class Sampler(threading.Thread):
    """The most server connections PostgreSQL had to ``database`` (every 20 ms), and
    the most clients PgBouncer served for it (every 10th sample, when it is up)."""

    def __init__(self, database: str, bouncer: PgBouncer) -> None:
        super().__init__(daemon=True)
        self.database = database
        self.bouncer = bouncer
        self.most = 0
        self.most_clients = 0
        self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            while not self.stop.wait(0.02):
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                   (self.database,)).fetchone()
                self.most = max(self.most, int(row[0]) if row else 0)
                self.samples += 1
                if self.samples % 10 == 0:
                    self.most_clients = max(self.most_clients, self._clients())

    def _clients(self) -> int:
        try:
            rows = self.bouncer.admin("SHOW CLIENTS")
        except psycopg.Error:  # restarting
            return 0
        return sum(1 for r in rows if r["database"] == self.database)


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_fleet_behind_pgbouncer_loses_nothing_through_its_restart(
    pg_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.plugins.pgbouncer import pgbouncer_or_skip

    pgbouncer_or_skip()
    bouncer = PgBouncer(pool_size=POOL)
    bouncer.start()
    sampler = Sampler(pg_database, bouncer)
    sampler.start()
    try:
        monkeypatch.setenv("KILN_CHAOS_MAX_CONNS", str(CONNS))
        restarting = Restarting(bouncer)
        spec = Spec(url=bouncer.url(pg_database, pooler="transaction"), seed=1,
                    tmp=tmp_path, duration=12.0, workers=WORKERS, jobs=6 * WORKERS,
                    concurrency=2, producers=PRODUCERS, producer_conns=CONNS,
                    config=FLEET_CONFIG,
                    faults=("kill", "term", "stop", "cut", "db_restart"), db=restarting,
                    first="db_restart")
        result = await run(spec)
    finally:
        sampler.stop.set()
        sampler.join(5)
        bouncer.stop()
    print({"most_server_connections": sampler.most, "most_clients": sampler.most_clients,
           "samples": sampler.samples})
    assert restarting.restarts >= 1
    check(spec, result)
    assert sampler.samples > 100
    assert 0 < sampler.most <= POOL
    assert sampler.most_clients > 4 * POOL  # the fleet's clients, multiplexed
