"""The chaos suite, CI form: three seeds per database, about half a minute each.

Real worker processes on an isolated database take SIGKILL and SIGTERM (the leader
too), SIGSTOP past dead_after, network cuts of one worker and outages of the database
(PostgreSQL and MariaDB, through loopback proxies; tests/chaos/harness.py says why not
a real restart here), then the queue settles and every job is accounted for
(tests/chaos/ledger.py). The long form is ``python -m bench.chaos``. Seeds:
KILN_CHAOS_SEEDS="7 8 9" replays others.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.chaos.harness import Spec, faults_for, run

SEEDS = [int(s) for s in os.environ.get("KILN_CHAOS_SEEDS", "1 2 3").split()]


@pytest.mark.chaos
@pytest.mark.timeout(150)
@pytest.mark.parametrize("seed", SEEDS)
async def test_nothing_lost_stuck_or_completed_twice(
    store_url: str, seed: int, tmp_path: Path
) -> None:
    backend = urlsplit(store_url).scheme
    spec = Spec(url=store_url, seed=seed, tmp=tmp_path, duration=12.0, workers=3, jobs=90,
                faults=faults_for(backend))
    result = await run(spec)
    print(json.dumps(result))
    assert result["jobs"] == spec.jobs
    assert result["executions"] >= result["jobs"]
    assert sum(result["faults"].values()) > 0, "no fault was injected"
    assert not result["violations"], "\n".join(result["violations"])
