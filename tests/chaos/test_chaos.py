"""The chaos suite, CI form: two seeds per database, about 25 seconds each.

Real worker processes on an isolated database take SIGKILL and SIGTERM (the leader
too), SIGSTOP past dead_after, network cuts of one worker and outages of the database
(PostgreSQL and MariaDB, through loopback proxies), then the queue settles and every
job is accounted for (tests/chaos/ledger.py). Every run has every fault type of its
database at least once (the harness's tour), whatever the seed. Real restarts of the
database run on a private server the test starts (tests/chaos/dbserver.py): the shared
servers on 5432/3306 serve every other test running on the machine. The long form is
``python -m bench.chaos``. Seeds: KILN_CHAOS_SEEDS="7 8 9" replays others.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.chaos.dbserver import available, private_server
from tests.chaos.harness import Spec, faults_for, run
from tests.plugins import databases

# Two seeds, not three: every run now tours every fault type and check() fails on a
# missing one (a seed used to miss some: seed 1's real-restart run had no SIGSTOP and
# no cut), so two runs per store still kill, terminate, stop and cut on every store;
# the long form (bench/chaos.py) is where many interleavings are drawn
# (docs/reliability.md: what the CI form catches).
SEEDS = [int(s) for s in os.environ.get("KILN_CHAOS_SEEDS", "1 2").split()]


@pytest.mark.chaos
@pytest.mark.timeout(150)
@pytest.mark.parametrize("seed", SEEDS)
async def test_nothing_lost_stuck_or_completed_twice(
    store_url: str, seed: int, tmp_path: Path
) -> None:
    backend = urlsplit(store_url).scheme
    spec = Spec(url=store_url, seed=seed, tmp=tmp_path, duration=12.0, workers=3, jobs=90,
                faults=faults_for(backend))
    check(spec, await run(spec))


@pytest.mark.chaos
@pytest.mark.timeout(150)
@pytest.mark.parametrize("backend", ["postgres", "mysql"])
async def test_nothing_lost_through_real_database_restarts(backend: str, tmp_path: Path) -> None:
    missing = available(backend)
    if missing:
        databases.unavailable(backend, missing)
    async with private_server(backend) as server:
        make = (databases.postgres_schema_url if backend == "postgres"
                else databases.mysql_database_url)
        for url in make(server.url):
            spec = Spec(url=url, seed=SEEDS[0], tmp=tmp_path, duration=12.0, workers=3,
                        jobs=90, faults=faults_for(backend, real_restart=True), db=server,
                        first="db_restart")
            result = await run(spec)
            assert result["faults"].get("db_restart", 0) >= 1
            check(spec, result)


def check(spec: Spec, result: dict[str, Any]) -> None:
    print(json.dumps(result))
    assert result["jobs"] == spec.jobs
    assert result["executions"] >= result["jobs"]
    missing = set(spec.faults) - set(result["faults"])
    assert not missing, f"fault types never injected: {sorted(missing)}"
    assert not result["violations"], "\n".join(result["violations"])
