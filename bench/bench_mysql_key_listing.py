"""MariaDB: what one listing of the rate keys with pending jobs costs, one round trip
per key (the plan before) against one round trip per 50 keys (kiln's), interleaved.

The admitter lists the keys at every pass (kiln/stores/mysql/_rates.py). With ``--keys``
keys (default 40) of ``--per-key`` pending jobs each, times ``--repeats`` listings of each
plan, alternating, and prints one JSON line: the median of each, their ratio, and the
machine's load average.

    python -m bench.bench_mysql_key_listing --keys 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.bench_results import fresh
from kiln._model._job import NewJob, RateLimit
from kiln.stores import store_from_url
from kiln.stores.mysql import _rates
from kiln.stores.mysql._columns import NOW
from kiln.stores.mysql._plan import Plan, Stmt, step

KEY_AFTER = "SELECT MIN(rate_key) FROM kiln_jobs WHERE state = 'pending' AND rate_key > %s"
KEY_DUE = ("SELECT EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'pending' AND rate_key = %s"
           f" AND run_at <= {NOW})")


def per_key() -> Plan[list[str]]:
    """The listing before: one round trip per key."""
    keys: list[str] = []
    last: str | None = None
    while True:
        stmts = [Stmt(KEY_AFTER, ("" if last is None else last,))]
        if last is not None:
            stmts.append(Stmt(KEY_DUE, (last,)))
        out = yield step(*stmts)
        if last is not None and out[1].rows[0][0]:
            keys.append(last)
        if out[0].rows[0][0] is None:
            return keys
        last = str(out[0].rows[0][0])


async def main(keys: int, jobs: int, repeats: int) -> dict[str, object]:
    url, drop = fresh("mysql", Path(tempfile.gettempdir()), "listing")
    store = store_from_url(url)
    await store.open()
    try:
        await store.migrate()
        names = [f"tenant-{i:03d}" for i in range(keys)]
        for name in names:
            await store.rate_limit_declare(name, RateLimit(rate=1))
        rows = [NewJob(kind="k", args={}, rate_key=name) for name in names for _ in range(jobs)]
        for start in range(0, len(rows), 5000):
            await store.job_insert_many(rows[start:start + 5000])
        plans = {"per_key": per_key, "batched": _rates.rate_keys_pending}
        times: dict[str, list[float]] = {name: [] for name in plans}
        for _ in range(repeats):
            for name, plan in plans.items():
                began = time.perf_counter()
                listed = await store._read("bench", plan)  # type: ignore[attr-defined]
                times[name].append(time.perf_counter() - began)
                assert listed == names, (name, listed[:3])
        before, now = statistics.median(times["per_key"]), statistics.median(times["batched"])
        return {"store": "mysql", "keys": keys, "pending_per_key": jobs, "repeats": repeats,
                "per_key_ms": round(before * 1000, 2), "batched_ms": round(now * 1000, 2),
                "ratio": round(now / before, 3), "load": os.getloadavg()[0]}
    finally:
        await store.close()
        drop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=40)
    parser.add_argument("--per-key", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=41)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.keys, args.per_key, args.repeats))))
