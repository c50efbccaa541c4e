"""Tag and metadata filters on each store: a page of a listing and a count, side by side.

Inserts ``--jobs`` plain jobs and then (those deleted) as many tagged ones through the
store API, timing both (80% tagged ``region:eu`` or ``region:us``, 1% ``vip``, one in
10,000 ``audit``; metadata ``{"tenant": n % 1000}``), then times, per store, the
listing's first page (51 rows, newest first) and the count for each filter, beside the
unfiltered page as the baseline. PostgreSQL answers from its GIN indexes; MariaDB and
SQLite check the JSON of the rows the other conditions leave (docs/guide.md, "Tags and
filters"). Prints one JSON object.

    python bench/bench_tag_filters.py [--jobs 100000] [--rounds 5]
        [--store sqlite --store mysql://root@127.0.0.1:3306/test ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kiln import JobFilter, JobState
from kiln._model._job import NewJob
from kiln.stores import Store, store_from_url

FILTERS: dict[str, JobFilter] = {
    "no filter (baseline)": JobFilter(),
    "tag common (40%)": JobFilter(tags=("region:eu",)),
    "tag 1%": JobFilter(tags=("vip",)),
    "tag rare (0.01%)": JobFilter(tags=("audit",)),
    "metadata tenant=42 (0.1%)": JobFilter(metadata={"tenant": 42}),
    "available + tag 1%": JobFilter(states=(JobState.AVAILABLE,), tags=("vip",)),
}
BATCH = 5000


def jobs(n: int) -> list[NewJob]:
    made = []
    for g in range(n):
        tags: tuple[str, ...] = () if g % 5 == 0 else (
            ("region:eu" if g % 2 == 0 else "region:us",)
            + (("vip",) if g % 100 == 1 else ()) + (("audit",) if g % 10_000 == 7 else ()))
        made.append(NewJob("bench.k", {"n": g}, queue="q", tags=tags,
                           metadata={"tenant": g % 1000}))
    return made


def scratch_url(url: str) -> tuple[str, Any]:
    """A fresh place for the jobs: a temp file for SQLite, a database or schema else."""
    parts = urlsplit(url)
    name = f"kiln_bench_tags_{uuid.uuid4().hex[:8]}"
    if url == "sqlite":
        folder = tempfile.mkdtemp()
        return f"sqlite:///{folder}/bench.db", lambda: None
    if parts.scheme.startswith("mysql"):
        import pymysql

        conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                               user=parts.username or "root", autocommit=True)
        conn.cursor().execute(f"CREATE DATABASE {name}")

        def drop() -> None:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS {name}")
            conn.close()

        return urlunsplit(parts._replace(path=f"/{name}")), drop
    import psycopg

    pg = psycopg.connect(url, autocommit=True)
    pg.execute(f"CREATE SCHEMA {name}")
    query = dict(parse_qsl(parts.query), options=f"-csearch_path={name}")

    def drop_schema() -> None:
        pg.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        pg.close()

    return urlunsplit(parts._replace(query=urlencode(query))), drop_schema


async def timed(call: Any, rounds: int) -> float:
    await call()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


async def insert_all(store: Store, made: list[NewJob]) -> float:
    started = time.perf_counter()
    for i in range(0, len(made), BATCH):
        await store.job_insert_many(made[i:i + BATCH])
    return time.perf_counter() - started


async def one_store(url: str, n: int, rounds: int) -> dict[str, Any]:
    target, drop = scratch_url(url)
    store: Store = store_from_url(target)
    await store.open()
    try:
        await store.migrate()
        plain = [NewJob("bench.plain", {"n": g}, queue="p") for g in range(n)]
        plain_s = await insert_all(store, plain)
        await store.jobs_delete(JobFilter(queue="p"))
        insert_s = await insert_all(store, jobs(n))
        if urlsplit(target).scheme.startswith("postgres"):
            import psycopg

            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute("ANALYZE kiln_jobs")
        results: dict[str, Any] = {}
        for name, f in FILTERS.items():
            page = await timed(lambda f=f: store.job_list(f, limit=51), rounds)
            count = await timed(lambda f=f: store.job_count(f), rounds)
            results[name] = {"page_ms": page, "count_ms": count,
                             "matches": await store.job_count(f)}
            print(f"  {url[:12]:12s} {name:28s} page {page:8.1f} ms  count {count:8.1f} ms",
                  file=sys.stderr)
        base = results["no filter (baseline)"]["page_ms"] or 0.1
        for item in results.values():
            item["page_vs_baseline"] = round(item["page_ms"] / base, 1)
        return {"insert_seconds": {"plain": round(plain_s, 2), "tagged": round(insert_s, 2),
                                   "tagged_vs_plain": round(insert_s / plain_s, 2)},
                "filters": results}
    finally:
        await store.close()
        drop()
        if url == "sqlite":
            Path(urlsplit(target).path).unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--store", action="append", default=None,
                        help="sqlite, or a database URL (repeat); default: all three")
    args = parser.parse_args()
    stores = args.store or ["sqlite", "mysql://root@127.0.0.1:3306/test",
                            "postgresql://postgres@127.0.0.1:5432/test"]
    out = {url: asyncio.run(one_store(url, args.jobs, args.rounds)) for url in stores}
    print(json.dumps({"bench": "tag_filters", "jobs": args.jobs, "stores": out}, indent=2))


if __name__ == "__main__":
    main()
