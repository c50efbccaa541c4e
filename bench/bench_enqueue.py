"""Enqueue throughput: 20,000 jobs in batches of 1,000 into PostgreSQL, kiln and peers.

kiln runs in this interpreter (``PostgresStore.job_insert_many``). The peers, pgqueuer
and procrastinate, run from their own virtualenv (``--peers-python``, default
/tmp/peers/bin/python; create it with ``python -m venv /tmp/peers &&
/tmp/peers/bin/pip install pgqueuer procrastinate``), each in its own database,
in the same run. Every system gets one warm-up batch, then ``--rounds`` timed runs;
the median is reported. Prints one JSON object per system, then the ratios.

``--producers`` measures instead what resolving a kind's declaration costs a producer
(docs/guide.md, "Kinds hold for every producer"): 2,000 single-job enqueues through
a ``kiln.Client`` that holds the kind's declaration, through one that resolves it from
the published declarations (cached), and straight into the store (no resolution at
all), in interleaved rounds, as ratios to the store.

    python bench/bench_enqueue.py [--url postgresql://postgres@127.0.0.1:5432/test]
    python bench/bench_enqueue.py --producers
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

import kiln
from kiln._job import NewJob
from kiln._kinds import make_kind
from kiln.stores.postgres import PostgresStore

JOBS = 20_000
BATCH = 1_000


def database_url(url: str, name: str) -> str:
    """A fresh database ``name`` on the server of ``url``."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


async def bench_kiln(url: str, rounds: int) -> list[float]:
    store = PostgresStore(url)
    await store.open()
    await store.migrate()
    batches = [
        [NewJob(kind="bench.noop", args={"n": b * BATCH + i}, queue="bench")
         for i in range(BATCH)]
        for b in range(JOBS // BATCH)
    ]
    await store.job_insert_many(batches[0])  # warm-up: pool, prepared statements
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        for batch in batches:
            await store.job_insert_many(batch)
        rates.append(JOBS / (time.perf_counter() - started))
    await store.close()
    return rates


SINGLE = 2_000


async def bench_producers(url: str, rounds: int) -> dict[str, list[float]]:
    """Single enqueues per second: local declaration, published one, the bare store."""
    store = PostgresStore(url)
    await store.open()
    await store.migrate()
    kind = make_kind("bench.mail", lambda job: None, queue="mail", max_attempts=12)
    if hasattr(store, "kinds_publish"):  # absent before kinds were published
        await store.kinds_publish("bench", "bench", 0, [kind.declaration()])
    clients = {"local": kiln.Client(store, {kind.name: kind}), "published": kiln.Client(store)}
    raw = NewJob(kind=kind.name, args={}, queue="mail", max_attempts=12)
    calls = {
        "store": lambda: store.job_insert_many([raw]),
        **{name: (lambda c=c: c.enqueue(kind.name, {})) for name, c in clients.items()},
    }
    for call in calls.values():
        await call()  # warm-up: prepared statements, the published declarations' cache
    rates: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.perf_counter()
            for _i in range(SINGLE):
                await call()
            rates[name].append(SINGLE / (time.perf_counter() - started))
    rates.update(await resolution_cost(clients, kind.name))
    await store.close()
    return rates


async def resolution_cost(clients: dict[str, kiln.Client], kind: str) -> dict[str, list[float]]:
    """Microseconds per enqueue spent before the insert (resolve, validate, build): the
    part a round trip's noise hides above. Without a kiln_kinds read after warm-up."""
    out: dict[str, list[float]] = {}
    for name, client in clients.items():
        catalog = getattr(client, "catalog", None)  # absent before kinds were published
        started = time.perf_counter()
        for _ in range(50_000):
            if catalog is not None:
                await catalog.ensure((kind,))
            client.build(kind, {})
        out[f"{name}_build_us"] = [(time.perf_counter() - started) / 50_000 * 1e6]
    return out


def report_producers(rates: dict[str, list[float]]) -> None:
    costs = {name: round(rates.pop(name)[0], 2) for name in list(rates) if "_us" in name}
    print(json.dumps({"before_insert_us_per_enqueue": costs}))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, median in medians.items():
        print(json.dumps({"producer": name, "enqueues_per_s": round(median), "calls": SINGLE,
                          "runs": [round(r) for r in rates[name]]}))
    print(json.dumps({"ratios": {f"{name}/store": round(m / medians["store"], 3)
                                 for name, m in medians.items() if name != "store"}}))


PGQUEUER = """
import asyncio, json, sys, time
import psycopg
from pgqueuer.db import PsycopgDriver
from pgqueuer.queries import Queries

async def main(url, rounds, jobs, batch):
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    queries = Queries(PsycopgDriver(conn))
    await queries.install()
    names = ["bench.noop"] * batch
    prios = [0] * batch
    payloads = [[json.dumps({"n": b * batch + i}).encode() for i in range(batch)]
                for b in range(jobs // batch)]
    await queries.enqueue(names, payloads[0], prios)
    rates = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for p in payloads:
            await queries.enqueue(names, p, prios)
        rates.append(jobs / (time.perf_counter() - t0))
    print(json.dumps(rates))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
"""

PROCRASTINATE = """
import asyncio, json, sys, time
import procrastinate

async def main(url, rounds, jobs, batch):
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="bench.noop", queue="bench")
    def noop(n: int) -> None: ...

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        batches = [[noop.configure() for _ in range(batch)] for _ in range(jobs // batch)]
        args = [[{"n": b * batch + i} for i in range(batch)] for b in range(jobs // batch)]
        async def one(b):
            await noop.batch_defer_async(*args[b])
        await one(0)
        rates = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for b in range(jobs // batch):
                await one(b)
            rates.append(jobs / (time.perf_counter() - t0))
    print(json.dumps(rates))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))
"""


def bench_peer(python: str, script: str, url: str, rounds: int) -> list[float] | str:
    done = subprocess.run(
        [python, "-c", textwrap.dedent(script), url, str(rounds), str(JOBS), str(BATCH)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
    rates: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return rates


def report(system: str, rates: list[float] | str) -> float | None:
    if isinstance(rates, str):
        print(json.dumps({"system": system, "error": rates}))
        return None
    median = statistics.median(rates)
    print(json.dumps({"system": system, "jobs_per_s": round(median), "jobs": JOBS,
                      "batch": BATCH, "runs": [round(r) for r in rates]}))
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get(
        "KILN_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peers-python", default="/tmp/peers/bin/python")
    parser.add_argument("--producers", action="store_true",
                        help="measure the cost of resolving declarations instead")
    args = parser.parse_args()
    if args.producers:
        url = database_url(args.url, "kiln_bench_producers")
        report_producers(asyncio.run(bench_producers(url, args.rounds)))
        return
    results: dict[str, float | None] = {}
    results["kiln"] = report(
        "kiln", asyncio.run(bench_kiln(database_url(args.url, "kiln_bench_kiln"), args.rounds))
    )
    if Path(args.peers_python).exists():
        for name, script in (("pgqueuer", PGQUEUER), ("procrastinate", PROCRASTINATE)):
            url = database_url(args.url, f"kiln_bench_{name}")
            results[name] = report(name, bench_peer(args.peers_python, script, url, args.rounds))
    else:
        print(json.dumps({"peers": f"skipped: {args.peers_python} not found"}), file=sys.stderr)
    kiln = results["kiln"]
    ratios = {f"kiln/{name}": round(kiln / rate, 2)
              for name, rate in results.items() if name != "kiln" and rate and kiln}
    print(json.dumps({"ratios": ratios}))


if __name__ == "__main__":
    main()
