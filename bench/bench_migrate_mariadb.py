"""MariaDB migrations on a big kiln_jobs with claims flowing (issue #45 item 2, ADR 0018).

For each start, a fresh database is migrated to that version, filled with ``--rows``
jobs (1% available, the rest completed), then ``kiln``'s migrate (the store's
``migrate()``, what ``kiln migrate`` runs) applies the rest while two threads claim and
complete jobs and one enqueues, with the statements an older worker runs, each timed.
Each version's duration comes from ``kiln_migrations.applied_at`` (the row is written
after the version's statements); a statement's wait is counted against the version
running when it started.

- ``through4``: from version 3; version 4 adds the columns of 5 to 13 instantly.
- ``past4``: from version 4 as an older kiln left it (without those columns): the
  first pending version adds them in one rebuild, writes waiting.

One JSON line per start: per version, seconds and the longest wait; in total, the
migration's seconds, the longest wait and the statements run meanwhile.

    python -m bench.bench_migrate_mariadb [--rows 1000000] [--only through4|past4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pymysql

from bench.bench_drain import drop_mysql_database, fresh_mysql_database
from kiln.stores import _migrations, store_from_url

HOISTED = ("attempt_running", "result", "tags", "conc_key", "defaulted")
STARTS = {"through4": 3, "past4": 4}


def connect(url: str) -> Any:
    parts = urlsplit(url)
    return pymysql.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                           user=parts.username or "root", password=parts.password or "",
                           database=parts.path.lstrip("/"), autocommit=True,
                           ssl_disabled=True)


def migrate(url: str, upto: int | None = None) -> list[int]:
    every = _migrations.load

    async def run() -> list[int]:
        store = store_from_url(url)
        await store.open()
        try:
            return await store.migrate()
        finally:
            await store.close()

    if upto is not None:  # the only reach under the API: stop at an older version
        _migrations.load = lambda package: every(package)[:upto]
    try:
        return asyncio.run(run())
    finally:
        _migrations.load = every


class Workers:
    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.timings: list[tuple[float, float]] = []  # (start epoch, seconds)
        self.lock = threading.Lock()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._run, args=(w,), daemon=True)
                        for w in (self._claim, self._claim, self._enqueue)]

    def __enter__(self) -> Workers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        if self.errors:
            raise self.errors[0]

    def _timed(self, cur: Any, sqls: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        start, t0 = time.time(), time.monotonic()
        rows: list[Any] = []
        for sql, args in sqls:
            cur.execute(sql, args or None)
            rows = list(cur.fetchall())
        with self.lock:
            self.timings.append((start, time.monotonic() - t0))
        return rows

    def _run(self, work: Any) -> None:
        try:
            conn = connect(self.url)
            with conn, conn.cursor() as cur:
                while not self.stop.is_set():
                    work(cur)
        except BaseException as exc:
            self.errors.append(exc)

    def _claim(self, cur: Any) -> None:
        start, t0 = time.time(), time.monotonic()
        cur.execute("BEGIN")
        cur.execute("SELECT id FROM kiln_jobs WHERE state = 'available' AND queue = 'q'"
                    " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED")
        row = cur.fetchone()
        if row:
            cur.execute("UPDATE kiln_jobs SET state = 'running', attempt = 1 WHERE id = %s",
                        (row[0],))
        cur.execute("COMMIT")
        with self.lock:
            self.timings.append((start, time.monotonic() - t0))
        if row:
            self._timed(cur, [("UPDATE kiln_jobs SET state = 'completed', finished_at ="
                               " UTC_TIMESTAMP(6) WHERE id = %s", (row[0],))])

    def _enqueue(self, cur: Any) -> None:
        self._timed(cur, [(
            "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, errors,"
            " run_at, created_at, max_attempts) VALUES ('q', 'k', 'available', '{}', '{}',"
            " '{}', '[]', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 3)", ())])
        time.sleep(0.005)  # a steady trickle, as tests/stores/test_online_migrations.py


def epoch(value: datetime) -> float:
    return value.replace(tzinfo=UTC).timestamp()


def one(start: str, rows: int) -> dict[str, Any]:
    url = fresh_mysql_database("kiln_bmig")
    try:
        migrate(url, STARTS[start])
        conn = connect(url)
        with conn, conn.cursor() as cur:
            if start == "past4":  # as a kiln before ADR 0018 left version 4
                cur.execute("ALTER TABLE kiln_jobs "
                            + ", ".join(f"DROP COLUMN {c}" for c in HOISTED))
            ready = max(rows // 100, 1000)
            cur.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, errors,"
                " run_at, created_at, max_attempts) SELECT 'q', 'k', IF(seq <= %s,"
                " 'available', 'completed'), '{}', '{}', '{}', '[]', UTC_TIMESTAMP(6),"
                f" UTC_TIMESTAMP(6), 3 FROM seq_1_to_{rows}", (ready,))
            cur.execute("ANALYZE TABLE kiln_jobs")
            cur.fetchall()
        with Workers(url) as workers:
            time.sleep(1)  # the workers get going
            began = time.time()
            applied = migrate(url)
            ended = time.time()
        conn = connect(url)
        with conn, conn.cursor() as cur:
            cur.execute("SELECT version, applied_at FROM kiln_migrations WHERE version > %s"
                        " ORDER BY version", (STARTS[start],))
            marks = [(int(v), epoch(at)) for v, at in cur.fetchall()]
        versions = []
        previous = began
        for version, at in marks:
            waits = [took for s, took in workers.timings if previous <= s < at]
            versions.append({"version": version, "seconds": round(at - previous, 2),
                             "worst_wait": round(max(waits, default=0.0), 3),
                             "statements": len(waits)})
            previous = at
        during = [took for s, took in workers.timings if began <= s < ended]
        return {"bench": "migrate_mariadb", "start": start, "from": STARTS[start],
                "rows": rows, "applied": applied, "seconds": round(ended - began, 2),
                "worst_wait": round(max(during, default=0.0), 3),
                "statements": len(during), "versions": versions,
                "loadavg": open("/proc/loadavg").read().split()[:3],
                "cores": os.cpu_count()}
    finally:
        drop_mysql_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--only", choices=sorted(STARTS))
    args = parser.parse_args()
    for start in [args.only] if args.only else list(STARTS):
        print(json.dumps(one(start, args.rows)), flush=True)


if __name__ == "__main__":
    main()
