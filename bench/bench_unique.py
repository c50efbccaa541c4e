"""Unique inserts beside plain ones: enqueue-many of 20,000 jobs in batches of 1,000,
each job unique by its argument (kiln.Unique(by=("args.n",))) or plain, on one store.

Rounds alternate plain and unique on the same fresh database; every round's unique
jobs have new keys (so all are inserted, each checked against the index). A last
pass enqueues one round's unique jobs again: all duplicates, none inserted. Prints
one JSON object per kind of insert and the ratio unique/plain of the medians (the
goal is at most 1.5).

    python bench/bench_unique.py [--url postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from kiln import Unique
from kiln._client import build_job
from kiln._job import NewJob
from kiln.stores import store_from_url

JOBS = 20_000
BATCH = 1_000
UNIQUE = Unique(by=("args.n",))


def batches(round_: int, unique: bool) -> list[list[NewJob]]:
    options = {"unique": UNIQUE} if unique else {}
    return [
        [build_job("bench.u", {"n": f"{round_}-{b * BATCH + i}"}, None, queue="bench", **options)
         for i in range(BATCH)]
        for b in range(JOBS // BATCH)
    ]


async def timed(store: object, work: list[list[NewJob]]) -> tuple[float, int]:
    started = time.perf_counter()
    inserted = 0
    for batch in work:
        ids = await store.job_insert_many(batch)  # type: ignore[attr-defined]
        inserted += sum(1 for i in ids if getattr(i, "inserted", True))
    return JOBS / (time.perf_counter() - started), inserted


async def main(url: str, rounds: int) -> None:
    store = store_from_url(url)
    await store.open()
    await store.migrate()
    await store.job_insert_many(batches(-1, True)[0])  # warm-up: connections, plans
    rates: dict[str, list[float]] = {"plain": [], "unique": []}
    for r in range(rounds):
        for kind in ("plain", "unique"):
            work = batches(r, kind == "unique")  # built outside the timing
            rate, inserted = await timed(store, work)
            assert inserted == JOBS, (kind, inserted)
            rates[kind].append(rate)
    rate, inserted = await timed(store, batches(0, True))  # every one a duplicate
    assert inserted == 0, inserted
    rates["duplicates"] = [rate]
    await store.close()
    medians = {k: statistics.median(v) for k, v in rates.items()}
    for kind, runs in rates.items():
        print(json.dumps({"insert": kind, "jobs_per_s": round(medians[kind]), "jobs": JOBS,
                          "batch": BATCH, "runs": [round(x) for x in runs]}))
    print(json.dumps({"ratio_unique_to_plain_time": round(medians["plain"] / medians["unique"], 2),
                      "url": url.split("?")[0]}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.rounds))
