"""Unique inserts beside plain ones: enqueue-many of 20,000 jobs in batches of 1,000
(``--batch``; ``--batch 20000`` is one call of all 20,000), each job unique by its
argument (kiln.Unique(by=("args.n",))) or plain, on one store.

Two ways, each in the same run on one fresh database: ``api``, through
``await app.aenqueue_many([(kind, args), ...])`` of a kind declared unique beside a
plain kind (what a user pays: the key is computed at enqueue); ``store``, the jobs
built outside the timing and inserted with ``store.job_insert_many`` (the database's
part alone). Rounds alternate plain and unique; every round's unique jobs have new
keys (so all are inserted, each checked against the index). A last pass enqueues one
round's unique jobs again: all duplicates, none inserted. Prints one JSON object per
way and kind of insert, and the ratio of the medians, unique time / plain time, per
way (the goal is at most 1.5).

    python -m bench.bench_unique [--url postgresql://postgres@127.0.0.1:5432/test]
    python -m bench.bench_unique --url sqlite:///tmp/unique.db
    python -m bench.bench_unique --url mysql://root@127.0.0.1:3306/test
    python -m bench.bench_unique --url sqlite:///tmp/unique.db --batch 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: python bench/bench_unique.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kiln
from bench.bench_enqueue import drop, fresh
from kiln import Unique
from kiln._model._build import build_job
from kiln._model._job import NewJob

JOBS = 20_000
BATCH = 1_000
UNIQUE = Unique(by=("args.n",))
Items = list[list[tuple[str, dict[str, Any]]]]


def items(round_: int, unique: bool, batch: int = BATCH) -> Items:
    kind = "bench.u" if unique else "bench.p"
    return [[(kind, {"n": f"{round_}-{b * batch + i}"}) for i in range(batch)]
            for b in range(JOBS // batch)]


def batches(round_: int, unique: bool, batch: int = BATCH) -> list[list[NewJob]]:
    options = {"unique": UNIQUE} if unique else {}
    return [[build_job(kind, args, None, queue="bench", **options) for kind, args in part]
            for part in items(round_, unique, batch)]


def _count(ids: list[Any]) -> int:
    return sum(1 for i in ids if getattr(i, "inserted", True))


async def timed_api(app: kiln.App, work: Items) -> tuple[float, int]:
    started = time.perf_counter()
    inserted = 0
    for batch in work:
        inserted += _count(await app.aenqueue_many(batch))
    return JOBS / (time.perf_counter() - started), inserted


async def timed_store(store: Any, work: list[list[NewJob]]) -> tuple[float, int]:
    started = time.perf_counter()
    inserted = 0
    for batch in work:
        inserted += _count(await store.job_insert_many(batch))
    return JOBS / (time.perf_counter() - started), inserted


async def main(url: str, rounds: int, batch: int = BATCH) -> None:
    app = kiln.App(url)
    app.register("bench.u", lambda job: None, queue="bench", unique=UNIQUE)
    app.register("bench.p", lambda job: None, queue="bench")
    await app.amigrate()
    store = app.new_store()
    await store.open()
    await app.aenqueue_many(items(-1, True)[0])  # warm-up: connections, plans
    await store.job_insert_many(batches(-2, True)[0])
    rates: dict[str, list[float]] = {f"{way}_{kind}": [] for way in ("api", "store")
                                     for kind in ("plain", "unique")}
    for r in range(rounds):
        for kind in ("plain", "unique"):
            rate, inserted = await timed_api(app, items(r, kind == "unique", batch))
            assert inserted == JOBS, ("api", kind, inserted)
            rates[f"api_{kind}"].append(rate)
            work = batches(1000 + r, kind == "unique", batch)  # built outside the timing
            rate, inserted = await timed_store(store, work)
            assert inserted == JOBS, ("store", kind, inserted)
            rates[f"store_{kind}"].append(rate)
    rate, inserted = await timed_api(app, items(0, True, batch))  # every one a duplicate
    assert inserted == 0, inserted
    rates["api_duplicates"] = [rate]
    await store.close()
    await app.aclose()
    medians = {k: statistics.median(v) for k, v in rates.items()}
    for name, runs in rates.items():
        way, kind = name.split("_")
        print(json.dumps({"way": way, "insert": kind, "jobs_per_s": round(medians[name]),
                          "jobs": JOBS, "batch": batch, "runs": [round(x) for x in runs]}))
    print(json.dumps({
        "ratio_unique_to_plain_time": {
            way: round(medians[f"{way}_plain"] / medians[f"{way}_unique"], 2)
            for way in ("api", "store")},
        "per_run": {way: [round(p / u, 2) for p, u in
                          zip(rates[f"{way}_plain"], rates[f"{way}_unique"], strict=True)]
                    for way in ("api", "store")},
        "url": url.split("?")[0].rsplit("/", 1)[0]}))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test",
                        help="a server (a fresh database is made beside the one named)"
                        " or an SQLite file (a fresh one is made in a temporary folder)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=BATCH,
                        help="jobs per enqueue-many call (a divisor of 20,000)")
    args = parser.parse_args()
    if args.batch <= 0 or JOBS % args.batch:
        parser.error(f"--batch must divide {JOBS}, got {args.batch}")
    with tempfile.TemporaryDirectory() as tmp:
        db = fresh(args.url, "kiln_bench_unique", Path(tmp))
        try:
            asyncio.run(main(db, args.rounds, args.batch))
        finally:
            drop(db)
