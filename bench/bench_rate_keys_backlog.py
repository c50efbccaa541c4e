"""What ``Client.rate_backlog`` (the store's ``rate_keys_backlog``, kilnotel's per-key
gauges every ``counts_ttl``) costs with a large rate-limited backlog, on PostgreSQL
(default), MariaDB or SQLite (``--store``; no ``--other`` there).

Builds, in a database of its own, ``--jobs`` pending jobs (due: their run_at is past)
spread over ``--keys`` rate keys, most of them on a few hot keys (key ``t{n}`` gets
about a share 1 / (n + 1)), each key declared in kiln_rate_limits, with
INSERT ... SELECT generate_series and VACUUM ANALYZE (bench code writes SQL directly),
plus ``--other`` available jobs without a key; the keys interleaved in the table, or
side by side with ``--clustered``. Then times, through the store,
``rate_keys_backlog(20, cap=100)`` (what kilnotel asks: kiln.stores.postgres.
_rate_backlog) and the exact grouped read (``rate_keys_backlog(20)``, what kilnotel
asked before), ``--rounds`` interleaved rounds, medians. Prints one JSON object: the
medians in ms, the load average, the keys and counts each returned and how far the
capped read's estimates were from the exact counts.

    python -m bench.bench_rate_keys_backlog --jobs 1000000 --keys 1000 --rounds 5
    python -m bench.bench_rate_keys_backlog --store sqlite --jobs 1000000 --keys 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

import kiln
from bench.bench_drain import drop_database, fresh_database, pg_execute
from kiln.stores import store_from_url

CAP = 100  # kilnotel's COUNT_CAP


def build(url: str, jobs: int, keys: int, other: int, clustered: bool) -> float:
    began = time.perf_counter()
    pg_execute(
        "INSERT INTO kiln_rate_limits (key, rate, per, burst, tokens, updated_at)"
        f" SELECT 't' || k, 10, 1, 0, 0, now() FROM generate_series(0, {keys - 1}) k", url)
    # key n with a share of about 1 / (n + 1) (log-uniform over 1..keys + 1): u is a
    # fixed pseudo-random draw in [0, 1) of g; clustered: each key's jobs contiguous
    # (enqueued key by key), else interleaved (keys enqueued together)
    u = "((g * 2654435761::bigint) % 1000003) / 1000003.0"
    key = f"'t' || (floor(power({keys + 1}.0, {u})) - 1)::int"
    order = f" ORDER BY {key}" if clustered else ""
    for lo in range(1, jobs + 1, 500_000):
        hi = min(lo + 499_999, jobs)
        pg_execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " created_at, rate_key) SELECT 'q' || (g % 20), 'k' || (g % 100), 'pending',"
            " jsonb_build_object('n', g), now() - interval '1 hour' + g * interval '1 ms',"
            f" 3, now() - interval '1 hour', {key} FROM generate_series({lo}, {hi}) g{order}",
            url)
    if other:
        pg_execute(
            "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
            " created_at) SELECT 'q' || (g % 20), 'k' || (g % 100), 'available',"
            " jsonb_build_object('n', g), now() - interval '1 hour', 3,"
            f" now() - interval '1 hour' FROM generate_series(1, {other}) g", url)
    pg_execute("VACUUM ANALYZE kiln_jobs", url)
    return time.perf_counter() - began


def build_other(url: str, jobs: int, keys: int, clustered: bool) -> float:
    """The same backlog on MariaDB (seq_1_to_N) or SQLite (rows from Python)."""
    import sqlite3
    from urllib.parse import urlsplit

    from tests.plugins.databases import mysql_connect

    began = time.perf_counter()
    if url.startswith("sqlite"):
        def key(g: int) -> str:
            return f"t{int((keys + 1) ** (((g * 2654435761) % 1000003) / 1000003.0)) - 1}"

        rows = sorted(range(1, jobs + 1), key=key) if clustered else range(1, jobs + 1)
        now = time.time()
        with sqlite3.connect(urlsplit(url).path[1:]) as conn:
            conn.executemany("INSERT INTO kiln_rate_limits (key, rate, per, burst, tokens,"
                             " updated_at) VALUES (?, 10, 1, 0, 0, ?)",
                             [(f"t{k}", now) for k in range(keys)])
            conn.executemany(
                "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts,"
                " created_at, rate_key) VALUES (?, ?, 'pending', ?, ?, 3, ?, ?)",
                ((f"q{g % 20}", f"k{g % 100}", f'{{"n": {g}}}', now - 3600 + g / 1000,
                  now - 3600, key(g)) for g in rows))
            conn.execute("ANALYZE")
        return time.perf_counter() - began
    u = "((seq * 2654435761) % 1000003) / 1000003.0"
    key_sql = f"CONCAT('t', FLOOR(POW({keys + 1}, {u})) - 1)"
    with mysql_connect(url) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO kiln_rate_limits (`key`, rate, per, burst, tokens, updated_at)"
                    f" SELECT CONCAT('t', seq), 10, 1, 0, 0, UTC_TIMESTAMP(6)"
                    f" FROM seq_0_to_{keys - 1}")
        order = f" ORDER BY {key_sql}" if clustered else ""
        for lo in range(1, jobs + 1, 250_000):
            hi = min(lo + 249_999, jobs)
            cur.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, run_at,"
                " max_attempts, errors, created_at, rate_key) SELECT CONCAT('q', seq % 20),"
                " CONCAT('k', seq % 100), 'pending', JSON_OBJECT('n', seq), '{}', '{}',"
                " UTC_TIMESTAMP(6) - INTERVAL 1 HOUR + INTERVAL seq MICROSECOND, 3, '[]',"
                f" UTC_TIMESTAMP(6), {key_sql} FROM seq_{lo}_to_{hi}{order}")
        cur.execute("ANALYZE TABLE kiln_jobs")
    return time.perf_counter() - began


async def measure(url: str, rounds: int) -> dict[str, Any]:
    options: dict[str, Any] = {} if url.startswith("sqlite") else {"max_conns": 2}
    store = store_from_url(url, **options)
    await store.open()
    new: list[float] = []
    old: list[float] = []
    got_new: Any = None
    got_old: Any = None
    try:
        for _ in range(rounds):
            began = time.perf_counter()
            got_new = await store.rate_keys_backlog(20, cap=CAP)
            new.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            got_old = await store.rate_keys_backlog(20)
            old.append((time.perf_counter() - began) * 1000)
    finally:
        await store.close()
    exact = {k: n for k, _, n in got_old}
    off = [abs(n - exact[k]) / exact[k] for k, _, n in got_new if k in exact]
    return {"capped_ms": round(statistics.median(new), 2),
            "exact_ms": round(statistics.median(old), 2),
            "same_keys": [k for k, _, _ in got_new] == [k for k, _, _ in got_old],
            "estimate_off_median": round(statistics.median(off), 3) if off else None,
            "estimate_off_max": round(max(off), 3) if off else None,
            "capped": [(k, n) for k, _, n in got_new], "exact": [(k, n) for k, _, n in got_old]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--other", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clustered", action="store_true",
                        help="each key's jobs side by side in the table (the sample's worst"
                        " case), not interleaved")
    parser.add_argument("--store", choices=("postgresql", "mariadb", "sqlite"),
                        default="postgresql")
    a = parser.parse_args()
    if a.store != "postgresql":
        from kiln.testing import migrated_url

        base = None if a.store == "sqlite" else "mysql://root@127.0.0.1:3306/test"
        with migrated_url(base) as url:
            got: dict[str, Any] = {
                "store": a.store, "jobs": a.jobs, "keys": a.keys, "clustered": a.clustered,
                "load_before": round(os.getloadavg()[0], 1),
                "build_s": round(build_other(url, a.jobs, a.keys, a.clustered), 1)}
            got.update(asyncio.run(measure(url, a.rounds)))
            got["load_after"] = round(os.getloadavg()[0], 1)
            print(json.dumps(got), flush=True)
        return
    url = fresh_database("kiln_rate_backlog")
    try:
        app = kiln.App(url)
        asyncio.run(app.amigrate())
        asyncio.run(app.aclose())
        out: dict[str, Any] = {"jobs": a.jobs, "keys": a.keys, "other": a.other,
                               "clustered": a.clustered,
                               "load_before": round(os.getloadavg()[0], 1)}
        out["build_s"] = round(build(url, a.jobs, a.keys, a.other, a.clustered), 1)
        out.update(asyncio.run(measure(url, a.rounds)))
        out["load_after"] = round(os.getloadavg()[0], 1)
        print(json.dumps(out), flush=True)
    finally:
        drop_database(url)


if __name__ == "__main__":
    main()
