"""SQLite listings over a big table: each listing the dashboard reads, by the single
statement (kiln.stores._filters.page, the old read) and by the store (index ranges
merged where the filter allows, kiln.stores.sqlite._listing), checked to give the
same rows; then the dashboard pages that read them, through the ASGI app.

Bench code, so it runs the old statement itself. Build the table with
``python -m bench.bench_scale --cases backlog --rows 2000000 --stores sqlite
--backlog-parts none --backlog-keep`` (it prints the URL as "kept"), then

    python -m bench.bench_listing sqlite:////tmp/kiln_backlog-XXXX/backlog.db [--rounds 5]

A ``mysql://`` URL (a kept MariaDB backlog) times the listings only, with EXPLAIN.
``--running N`` first turns N scheduled jobs, spread over the ids, into running ones
(the Servers page's read then has something to find). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sqlite3
import statistics
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from kiln._model._job import JobFilter, JobState
from kiln.stores._filters import page
from kiln.stores.sqlite import _admin
from kiln.stores.sqlite._store import connect
from kiln.web import create_app

RUNNING, AVAILABLE = (JobState.RUNNING,), (JobState.AVAILABLE,)
PAGES = {"servers": "/servers", "jobs kind k42": "/jobs?kind=k42",
         "jobs available": "/jobs?state=available", "jobs queue q3": "/jobs?queue=q3",
         "jobs tenant arg": "/jobs?state=available&arg=tenant=7",
         "jobs failed": "/jobs?state=failed"}


def listings(top: int) -> dict[str, tuple[JobFilter, int, int | None]]:
    """(filter, limit, before_id) of each listing; ``top``: the newest id + 1."""
    window = max(top - 20_000, 1)  # the web's scan window (kiln.web._jobs.SCAN_IDS)
    return {
        "running 500 (servers page)": (JobFilter(states=RUNNING), 500, None),
        "kind k42": (JobFilter(kind="k42"), 51, None),
        "available, window": (JobFilter(states=AVAILABLE, min_id=window), 51, None),
        "available": (JobFilter(states=AVAILABLE), 51, None),
        "available, page at mid": (JobFilter(states=AVAILABLE), 51, top // 4),
        "scheduled": (JobFilter(states=(JobState.SCHEDULED,)), 51, None),
        "failed": (JobFilter(states=(JobState.FAILED,)), 51, None),
        "queue q3": (JobFilter(queue="q3"), 51, None),
        "queue q3 + kind k43": (JobFilter(queue="q3", kind="k43"), 51, None),
        "available + tenant arg, window": (
            JobFilter(states=AVAILABLE, args={"tenant": 7}, min_id=window), 51, None),
        "available + tenant arg": (JobFilter(states=AVAILABLE, args={"tenant": 7}), 51, None),
    }


def timed(fn: Callable[[], list[Any]], rounds: int) -> tuple[float, list[int]]:
    times, ids = [], []
    for _ in range(rounds):
        began = time.perf_counter()
        ids = [int(r["id"]) for r in fn()]
        times.append((time.perf_counter() - began) * 1000)
    return round(statistics.median(times), 2), ids


def mariadb(url: str, rounds: int) -> dict[str, Any]:
    """The same listings on MariaDB: the old statement against the store's own
    (kiln.stores.mysql._admin.list_jobs' first statement), each with its EXPLAIN."""
    import pymysql

    from kiln.stores.mysql import _admin as my

    parts = urlsplit(url)
    conn = pymysql.connect(host=parts.hostname, port=parts.port or 3306,
                           user=parts.username, database=parts.path[1:])
    out: dict[str, Any] = {}
    with conn.cursor() as cur:
        cur.execute("SELECT MAX(id) FROM kiln_jobs")
        top = int(cur.fetchone()[0]) + 1
        cases = listings(top)
        cases["kind none"] = (JobFilter(kind="none"), 51, None)
        cases["available + kind k42"] = (JobFilter(states=AVAILABLE, kind="k42"), 51, None)
        for name, (f, limit, before) in cases.items():
            sql, params = page(f, my.FILTER_SQL, my.BRIEF_COLS, before, None)
            new = next(my.list_jobs(f, limit, before, brief=True)).stmts[0]
            row: dict[str, Any] = {}
            for which, (q, p) in (("old", (sql, [*params, limit])),
                                  ("new", (new.sql, list(new.params)))):
                cur.execute("EXPLAIN " + q, p)
                row[f"{which}_plan"] = [f"{r[3]} {r[5]}" for r in cur.fetchall()][:2]
                row[f"{which}_ms"], row[f"{which}_ids"] = timed(
                    functools.partial(_fetch, cur, q, p), rounds)
            row["rows"] = len(row["new_ids"])
            row["same"] = row.pop("new_ids") == row.pop("old_ids")
            out[name] = row
    conn.close()
    return out


def _fetch(cur: Any, sql: str, params: list[Any]) -> list[Any]:
    cur.execute(sql, params)
    return [{"id": r[0]} for r in cur.fetchall()]


def _rows(conn: sqlite3.Connection, sql: str, params: list[Any]) -> list[Any]:
    return conn.execute(sql, params).fetchall()


def direct(conn: sqlite3.Connection, rounds: int) -> dict[str, Any]:
    top = int(conn.execute("SELECT MAX(id) FROM kiln_jobs").fetchone()[0]) + 1
    out: dict[str, Any] = {}
    for name, (f, limit, before) in listings(top).items():
        sql, params = page(f, _admin.FILTER_SQL, _admin.BRIEF_COLS, before, None)
        old_ms, want = timed(functools.partial(_rows, conn, sql, [*params, limit]), rounds)
        new_ms, got = timed(functools.partial(
            _admin._listed, conn, f, limit, before, None, _admin.BRIEF_COLS), rounds)
        out[name] = {"old_ms": old_ms, "new_ms": new_ms, "rows": len(got), "same": got == want}
    return out


async def pages(url: str) -> dict[str, Any]:
    app = create_app(url)
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as http:
        for name, path in PAGES.items():
            times = []
            for _ in range(4):
                began = time.perf_counter()
                response = await http.get(path)
                times.append((time.perf_counter() - began) * 1000)
            out[name] = {"status": response.status_code,
                         "median_ms": round(statistics.median(times[1:]), 1)}
        await app.state.kiln.source.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--running", type=int, default=0)
    parser.add_argument("--no-pages", action="store_true")
    a = parser.parse_args()
    if a.url.startswith("mysql"):
        print(json.dumps({"mariadb": mariadb(a.url, a.rounds)}, indent=1))
        return
    conn = connect(urlsplit(a.url).path[1:])
    if a.running:
        ids = conn.execute("SELECT id FROM kiln_jobs WHERE state = 'scheduled'"
                           " ORDER BY id").fetchall()
        step = max(len(ids) // a.running, 1)
        chosen = [int(r[0]) for r in ids[::step][: a.running]]
        conn.executemany("UPDATE kiln_jobs SET state = 'running', server_id = 'gone',"
                         " attempt = 1 WHERE id = ?", [(i,) for i in chosen])
    rows = int(conn.execute("SELECT COUNT(*) FROM kiln_jobs").fetchone()[0])
    out: dict[str, Any] = {"rows": rows, "sqlite": sqlite3.sqlite_version,
                           "listings": direct(conn, a.rounds)}
    conn.close()
    if not a.no_pages:
        out["pages"] = asyncio.run(pages(a.url))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
