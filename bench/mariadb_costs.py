"""Where a MariaDB drain's time goes, beside PostgreSQL (bench/RESULTS.md, "Where
MariaDB's time goes").

Two measurements, one JSON line each:

- ``statements``: MariaDB's slow query log at ``long_query_time = 0`` (set globally
  for the run and put back after it) over one drain of ``--jobs`` no-op jobs by one
  ``kiln worker`` process (``bench.bench_workers``), every statement of the drain's
  database grouped by its shape: count, server time, rows examined, affected and sent,
  per job. Other databases' statements in the log are left out.
- ``updates``: the two updates every job needs (claim: to running; completion: to
  completed), 50 rows per statement and a commit after each, by primary key, on a
  table of ``--jobs`` jobs made by kiln's migrations: MariaDB with kiln's indexes,
  MariaDB with every secondary index dropped, PostgreSQL with kiln's indexes,
  alternating for ``--rounds`` rounds; microseconds per row, medians.

    python -m bench.mariadb_costs [--jobs 10000] [--rounds 3] [--only statements|updates]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

import psycopg
import pymysql

import kiln
from bench.bench_drain import (
    MYSQL,
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
)

BATCH = 50
LOG = "/tmp/kiln-mariadb-costs-slow.log"


def _my(url: str | None = None) -> Any:
    db = (url or MYSQL).rsplit("/", 1)[1]
    return pymysql.connect(host="127.0.0.1", port=3306, user="root", database=db,
                           autocommit=True)


def _shape(sql: str) -> str:
    """A statement with its literals and repeated value lists folded."""
    sql = re.sub(r"'[^']*'", "?", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "N", sql)
    sql = re.sub(r"\((?:\s*[?N]\s*,)*\s*[?N]\s*\)(?:\s*,\s*\((?:\s*[?N]\s*,)*\s*[?N]\s*\))*",
                 "(...)", sql)
    return sql[:120]


def statements(jobs: int) -> dict[str, Any]:
    admin = _my()
    cur = admin.cursor()
    cur.execute("SELECT @@GLOBAL.slow_query_log_file, @@GLOBAL.long_query_time,"
                " @@GLOBAL.slow_query_log")
    old_file, old_time, old_on = cur.fetchone()
    if os.path.exists(LOG):
        os.remove(LOG)  # the server creates it, as its own user
    cur.execute(f"SET GLOBAL slow_query_log_file = '{LOG}'")
    cur.execute("SET GLOBAL long_query_time = 0")
    cur.execute("SET GLOBAL slow_query_log = 1")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "bench.bench_workers", "--procs", "1", "--databases",
             "mariadb", "--jobs", str(jobs), "--runs", "1"],
            capture_output=True, text=True, timeout=600, check=True,
        ).stdout
    finally:
        cur.execute(f"SET GLOBAL slow_query_log = {int(old_on)}")  # put back as found
        cur.execute(f"SET GLOBAL long_query_time = {float(old_time)}")
        cur.execute(f"SET GLOBAL slow_query_log_file = '{old_file}'")
        admin.close()
    drain = json.loads(out.splitlines()[0])
    groups: dict[str, list[float]] = collections.defaultdict(lambda: [0.0] * 5)
    with open(LOG, errors="replace") as f:
        entries = re.split(r"\n(?=# User@Host)", f.read())
    for e in entries:
        schema = re.search(r"Schema: (\S*)", e)
        if not schema or not schema.group(1).startswith("kiln_workers"):
            continue
        skip = ("#", "SET timestamp", "use ")
        sql = " ".join(line for line in e.splitlines() if not line.startswith(skip))
        g = groups[_shape(sql.strip())]
        g[0] += 1
        g[1] += float(re.search(r"Query_time: ([\d.]+)", e).group(1))  # type: ignore[union-attr]
        for i, name in ((2, "Rows_examined"), (3, "Rows_affected"), (4, "Rows_sent")):
            g[i] += int(re.search(rf"{name}: (\d+)", e).group(1))  # type: ignore[union-attr]
    rows = sorted(groups.items(), key=lambda kv: -kv[1][1])
    return {
        "measure": "statements", "jobs": jobs, "drain": drain,
        "server_s_total": round(sum(g[1] for g in groups.values()), 3),
        "by_statement": [
            {"statement": k, "count": int(g[0]), "server_s": round(g[1], 4),
             "us_per_job": round(g[1] / jobs * 1e6, 1), "examined": int(g[2]),
             "affected": int(g[3]), "sent": int(g[4])}
            for k, g in rows[:12]
        ],
    }


def _fill(url: str) -> None:
    app = kiln.App(url)
    app.register("k", lambda job: None, queue="q")
    app.migrate()
    app.enqueue_many([("k", {"n": i, "payload": "x" * 40}) for i in range(JOBS)])
    app.close()


def _updates(execute: Any, commit: Any, ids: list[int], mark: Any) -> list[float]:
    claim, done, commits = 0.0, 0.0, 0.0
    for i in range(0, len(ids), BATCH):
        chunk = ids[i:i + BATCH]
        t = time.perf_counter()
        execute("UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1,"
                f" attempted_at = {mark}, server_id = 's' WHERE id IN ({_marks(chunk)})", chunk)
        claim += time.perf_counter() - t
        t = time.perf_counter()
        commit()
        commits += time.perf_counter() - t
        t = time.perf_counter()
        execute(f"UPDATE kiln_jobs SET state = 'completed', finished_at = {mark},"
                f" server_id = NULL WHERE id IN ({_marks(chunk)})", chunk)
        done += time.perf_counter() - t
        commit()
    return [round(x / len(ids) * 1e6, 1) for x in (claim, done, commits)]


def _marks(chunk: list[int]) -> str:
    return ", ".join(["%s"] * len(chunk))


def _mariadb_updates(drop: bool) -> list[float]:
    url = fresh_mysql_database("kiln_costs")
    try:
        _fill(url)
        conn = _my(url)
        conn.autocommit(False)
        cur = conn.cursor()
        if drop:
            cur.execute("SHOW INDEX FROM kiln_jobs")
            for name in {r[2] for r in cur.fetchall()} - {"PRIMARY"}:
                cur.execute(f"ALTER TABLE kiln_jobs DROP INDEX {name}")
        cur.execute("SELECT id FROM kiln_jobs ORDER BY id")
        ids = [int(r[0]) for r in cur.fetchall()]
        conn.commit()
        out = _updates(cur.execute, conn.commit, ids, "UTC_TIMESTAMP(6)")
        conn.close()
        return out
    finally:
        drop_mysql_database(url)


def _postgres_updates() -> list[float]:
    url = fresh_database("kiln_costs")
    try:
        _fill(url)
        with psycopg.connect(url) as conn:
            cur = conn.cursor()
            ids = [int(r[0]) for r in cur.execute("SELECT id FROM kiln_jobs ORDER BY id")]
            conn.commit()
            return _updates(cur.execute, conn.commit, ids, "now()")
    finally:
        drop_database(url)


def updates(rounds: int) -> dict[str, Any]:
    runs: dict[str, list[list[float]]] = {"mariadb": [], "mariadb_no_secondary": [],
                                          "postgresql": []}
    for _ in range(rounds):
        runs["mariadb"].append(_mariadb_updates(drop=False))
        runs["mariadb_no_secondary"].append(_mariadb_updates(drop=True))
        runs["postgresql"].append(_postgres_updates())
    return {
        "measure": "updates", "jobs": JOBS, "rows_per_statement": BATCH, "rounds": rounds,
        "us_per_row": {
            name: dict(zip(("claim_update", "completion_update", "commit"),
                           (statistics.median(r[i] for r in rs) for i in range(3)), strict=True))
            for name, rs in runs.items()
        },
        "runs": runs,
    }


JOBS = 10_000


def main() -> None:
    global JOBS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("statements", "updates"))
    opts = parser.parse_args()
    JOBS = opts.jobs
    if opts.only in (None, "statements"):
        print(json.dumps(statements(opts.jobs)), flush=True)
    if opts.only in (None, "updates"):
        print(json.dumps(updates(opts.rounds)), flush=True)


if __name__ == "__main__":
    main()
