"""kiln where its users will be in a year: a table full of finished jobs.

Three cases, each beside the same measurement on a fresh table in the same run, through
the paths users take: jobs go in with ``app.aenqueue_many``, a ``kiln worker``
process (``bench/scale_app.py``) runs them, and its own pruner deletes old ones.

- ``drain``: 50,000 jobs drained by one worker (concurrency 10), on a fresh table and
  on one that also holds 1,000,000 finished jobs (90% completed, 10% failed after 3
  attempts with their tracebacks, finished 2 to 22 hours ago, realistic args; the
  history is enqueued and then aged by one UPDATE per 100,000 rows, then VACUUM
  ANALYZE). Jobs are enqueued into a paused queue, the worker starts and registers,
  and the clock runs from ``resume_queue`` until none is available or running.
  Alternates fresh and aged ``--runs`` times.
- ``prune``: a steady inflow (``--rate`` jobs/s, default 1,000, in batches every 50 ms)
  to a worker on the aged table for ``--window`` seconds, once with a retention that
  keeps the history (no pruning) and once with ``--prune-completed-after 1h
  --prune-failed-after 1h --prune-interval 1s``, so the worker's pruner deletes the
  1,000,000 rows while it claims. Reports the inflow jobs' pickup latency
  (``attempted_at - run_at``, database clock; p50, p99, max) while pruning ran and
  without, how fast the pruner deleted (rows/s, which must beat the inflow), and on
  PostgreSQL how many samples (every 20 ms) found a kiln session waiting on a lock.
- ``steady``: a fresh table, a worker that prunes completed jobs after
  ``--retention`` seconds (default 300), inflow at ``--rate`` for ``--steady``
  seconds (default 3,600) at the database's default autovacuum settings (on
  PostgreSQL, autovacuum is turned on for the run with ALTER SYSTEM if the server
  has it off, as CI images do, and reset after); every ``--sample`` seconds the
  table's live and dead rows and its table and index sizes.

- ``backlog`` (``--stores postgresql,mariadb,sqlite``, one after the other; not in
  the default cases): ``--rows`` jobs (default
  10,000,000) waiting, half available across 20 queues and 100 kinds, half scheduled
  over the next day; claims, a queue's drain, the releaser, enqueueing, the leader's
  maintenance, the dashboard and ``kiln jobs list --all`` measured with it in place
  (bench/scale_backlog.py says how). ``--backlog-parts`` picks some.

Prints one JSON object per measurement, then a summary with the ratios.

    python -m bench.bench_scale [--database postgresql|mariadb|sqlite] \\
        [--cases drain,prune,steady] [--history 1000000] [--jobs 50000] [--runs 2]
    python -m bench.bench_scale --cases backlog [--rows 10000000] [--claims 200] \\
        [--stores postgresql,mariadb,sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kiln
from bench import _procs, scale_backlog
from bench.bench_drain import (
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
)
from bench.scale_app import KIND

ROOT = Path(__file__).resolve().parents[1]
TRACEBACK = "Traceback (most recent call last):\n" + "".join(
    f'  File "/srv/app/tasks/sync.py", line {40 + i}, in step_{i}\n'
    f"    response = client.post(url, json=payload, timeout=30)\n" for i in range(10)
) + "ConnectionError: upstream api.example.com timed out after 30s\n"
ERROR = "ConnectionError: upstream api.example.com timed out after 30s"
# 0 once drained. ``conc_key IS NULL`` lets PostgreSQL's partial claim index answer:
# without it the planner, whose statistics see a table of finished jobs, scans it all.
LEFT = ("SELECT (EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'available'"
        " AND conc_key IS NULL){cast}) + (EXISTS (SELECT 1 FROM kiln_jobs"
        " WHERE state = 'running'){cast})")


def args_for(i: int) -> dict[str, Any]:
    """About 250 bytes of JSON, as an order-sync job might carry."""
    return {"tenant": f"tenant-{i % 50}", "order_id": i, "email": f"user{i}@example.com",
            "url": f"https://api.example.com/v2/orders/{i}/sync", "items": [i, i + 1, i + 2],
            "note": "priority customer, resend the invoice if the first attempt bounced"}


class Db:
    """One database of the benchmark's own, and the dialect's SQL for it."""

    def __init__(self, kind: str, url: str | None = None) -> None:
        """A fresh database of its own, or (PostgreSQL) ``url``'s, which it never drops."""
        self.kind = kind
        self._tmp: str | None = None
        self._local = threading.local()
        self._conns: list[Any] = []
        if kind == "postgresql":
            self.url = url or fresh_database("kiln_scale")
            self.process = "postgres"
        elif kind == "mariadb":
            self.url = fresh_mysql_database("kiln_scale")
            self.process = "mariadbd"
        else:
            self._tmp = tempfile.mkdtemp(prefix="kiln-scale-")
            self.url = f"sqlite:///{self._tmp}/scale.db"
            self.process = ""

    def _connect(self) -> Any:
        if self.kind == "postgresql":
            import psycopg

            return psycopg.connect(self.url, autocommit=True)
        if self.kind == "mariadb":
            from urllib.parse import urlsplit

            import pymysql

            p = urlsplit(self.url)
            return pymysql.connect(host=p.hostname, port=p.port or 3306,
                                   user=p.username or "root", password=p.password or "",
                                   database=p.path.lstrip("/"), autocommit=True)
        # a sampler thread's connection is closed by the main thread at the end
        conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=30,
                               isolation_level=None, check_same_thread=False)
        return conn

    def run(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """One statement on this thread's kept connection (autocommit)."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            self._conns.append(conn)
        cur = conn.cursor()
        try:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []
        finally:
            cur.close()

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns.clear()
        self._local = threading.local()

    def drop(self) -> None:
        self.close()
        if self.kind == "postgresql":
            drop_database(self.url)
        elif self.kind == "mariadb":
            drop_mysql_database(self.url)
        elif self._tmp is not None:
            for name in os.listdir(self._tmp):
                os.unlink(os.path.join(self._tmp, name))
            os.rmdir(self._tmp)

    # the history ------------------------------------------------------------------
    def age(self, lo: int, hi: int) -> None:
        """Jobs lo..hi become finished: 1 in 10 failed after 3 attempts, the rest
        completed, finished 2 to 22 hours ago."""
        if self.kind == "postgresql":
            self.run(
                "UPDATE kiln_jobs SET"
                " state = CASE WHEN id %% 10 = 0 THEN 'failed' ELSE 'completed' END,"
                " attempt = CASE WHEN id %% 10 = 0 THEN 3 ELSE 1 END,"
                " attempted_at = now() - interval '2 hours' - (id %% 72000) * interval '1s',"
                " finished_at = now() - interval '2 hours' - (id %% 72000) * interval '1s'"
                " + interval '40 ms', server_id = 'bench-host-' || (id %% 8),"
                " errors = CASE WHEN id %% 10 = 0 THEN (SELECT jsonb_agg(jsonb_build_object("
                "'attempt', a, 'at', extract(epoch FROM now()) - 7200 - (id %% 72000) - 60 * a,"
                " 'error', %s::text, 'traceback', %s::text, 'server_id', 'bench-host-1'))"
                " FROM generate_series(1, 3) a) ELSE '[]'::jsonb END"
                " WHERE id BETWEEN %s AND %s", (ERROR, TRACEBACK, lo, hi))
        elif self.kind == "mariadb":
            entry = ("JSON_OBJECT('attempt', {a}, 'at', UNIX_TIMESTAMP() - 7200 - (id %% 72000)"
                     " - 60 * {a}, 'error', %s, 'traceback', %s, 'server_id', 'bench-host-1')")
            self.run(
                "UPDATE kiln_jobs SET state = IF(id %% 10 = 0, 'failed', 'completed'),"
                " attempt = IF(id %% 10 = 0, 3, 1),"
                " attempted_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR - INTERVAL (id %% 72000)"
                " SECOND, finished_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR"
                " - INTERVAL (id %% 72000) SECOND + INTERVAL 40000 MICROSECOND,"
                " server_id = CONCAT('bench-host-', id %% 8),"
                " errors = IF(id %% 10 = 0, JSON_ARRAY("
                + ", ".join(entry.format(a=a) for a in (1, 2, 3))
                + "), '[]') WHERE id BETWEEN %s AND %s",
                (ERROR, TRACEBACK) * 3 + (lo, hi))
        else:
            entry = ("json_object('attempt', {a}, 'at', :now - 7200 - (id % 72000)"
                     " - 60 * {a}, 'error', :error, 'traceback', :traceback, 'server_id',"
                     " 'bench-host-1')")
            self.run(
                "UPDATE kiln_jobs SET"
                " state = CASE WHEN id % 10 = 0 THEN 'failed' ELSE 'completed' END,"
                " attempt = CASE WHEN id % 10 = 0 THEN 3 ELSE 1 END,"
                " attempted_at = :now - 7200 - (id % 72000),"
                " finished_at = :now - 7200 - (id % 72000) + 0.04,"
                " server_id = 'bench-host-' || (id % 8),"
                " errors = CASE WHEN id % 10 = 0 THEN json_array("
                + ", ".join(entry.format(a=a) for a in (1, 2, 3))
                + ") ELSE '[]' END WHERE id BETWEEN :lo AND :hi",
                {"now": time.time(), "error": ERROR, "traceback": TRACEBACK, "lo": lo, "hi": hi})

    def tidy(self) -> None:
        """What autovacuum (or its counterpart) would have done to a year-old table."""
        if self.kind == "postgresql":
            self.run("VACUUM ANALYZE kiln_jobs")
        elif self.kind == "mariadb":
            self.run("ANALYZE TABLE kiln_jobs")
        else:
            self.run("ANALYZE")

    # what the cases read ------------------------------------------------------------
    def left(self) -> int:
        return int(self.run(LEFT.format(cast="::int" if self.kind == "postgresql" else ""))[0][0])

    def history_left(self) -> int:
        """Finished jobs older than an hour (the aged history, while it is pruned)."""
        cutoff = {"postgresql": "now() - interval '1 hour'",
                  "mariadb": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
                  "sqlite": f"{time.time() - 3600}"}[self.kind]
        return int(self.run("SELECT count(*) FROM kiln_jobs WHERE state IN"
                            f" ('completed', 'failed') AND finished_at < {cutoff}")[0][0])

    def pickups_ms(self, after_id: int) -> list[tuple[float, float]]:
        """(run_at as unix seconds, pickup latency in ms) of the jobs after ``after_id``."""
        sql = {
            "postgresql": "SELECT extract(epoch FROM run_at)::float8, extract(epoch FROM"
                          " attempted_at - run_at)::float8 * 1000 FROM kiln_jobs"
                          " WHERE id > %s AND attempted_at IS NOT NULL",
            "mariadb": "SELECT UNIX_TIMESTAMP(run_at), TIMESTAMPDIFF(MICROSECOND, run_at,"
                       " attempted_at) / 1000 FROM kiln_jobs WHERE id > %s"
                       " AND attempted_at IS NOT NULL",
            "sqlite": "SELECT run_at, (attempted_at - run_at) * 1000 FROM kiln_jobs"
                      " WHERE id > ? AND attempted_at IS NOT NULL",
        }[self.kind]
        return [(float(a), float(b)) for a, b in self.run(sql, (after_id,))]

    def max_id(self) -> int:
        return int(self.run("SELECT coalesce(max(id), 0) FROM kiln_jobs")[0][0])

    def sizes(self) -> dict[str, Any]:
        if self.kind == "postgresql":
            row = self.run(
                "SELECT n_live_tup, n_dead_tup, pg_table_size('kiln_jobs'),"
                " pg_indexes_size('kiln_jobs'), autovacuum_count, autoanalyze_count"
                " FROM pg_stat_user_tables WHERE relname = 'kiln_jobs'")[0]
            return {"live_rows": row[0], "dead_rows": row[1], "table_mb": _mb(row[2]),
                    "indexes_mb": _mb(row[3]), "autovacuums": row[4], "autoanalyzes": row[5]}
        if self.kind == "mariadb":
            row = self.run(
                "SELECT TABLE_ROWS, DATA_LENGTH, INDEX_LENGTH, DATA_FREE FROM"
                " information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()"
                " AND TABLE_NAME = 'kiln_jobs'")[0]
            history = self.run("SELECT COUNT FROM information_schema.INNODB_METRICS"
                               " WHERE NAME = 'trx_rseg_history_len'")
            return {"live_rows_estimate": row[0], "table_mb": _mb(row[1]),
                    "indexes_mb": _mb(row[2]), "free_mb": _mb(row[3]),
                    "undo_history_length": history[0][0] if history else None}
        pages, free, size = (self.run(f"PRAGMA {p}")[0][0]
                             for p in ("page_count", "freelist_count", "page_size"))
        return {"live_rows": self.run("SELECT count(*) FROM kiln_jobs")[0][0],
                "file_mb": _mb(pages * size), "free_mb": _mb(free * size)}

    @contextlib.contextmanager
    def default_autovacuum(self) -> Iterator[str]:
        """PostgreSQL's default autovacuum for the duration, whatever the server says.

        A server may run with ``autovacuum = off`` (CI images turn it off); the steady
        case is about the default settings, so it turns autovacuum on with ALTER SYSTEM
        and a reload, and resets it after. Yields the setting the server had."""
        if self.kind != "postgresql":
            yield ""
            return
        before = str(self.run("SHOW autovacuum")[0][0])
        if before == "on":
            yield before
            return
        self.run("ALTER SYSTEM SET autovacuum = on")
        self.run("SELECT pg_reload_conf()")
        try:
            yield before
        finally:
            self.run("ALTER SYSTEM RESET autovacuum")
            self.run("SELECT pg_reload_conf()")

    def lock_waits(self) -> int:
        """Sessions of this database waiting on a heavyweight lock (PostgreSQL)."""
        if self.kind != "postgresql":
            return 0
        return int(self.run("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                            " current_database() AND wait_event_type = 'Lock'")[0][0])


def _mb(n: Any) -> float:
    return round(int(n or 0) / 1e6, 1)


# producing, through the public API ---------------------------------------------------
async def enqueue(url: str, count: int, first: int = 0, batch: int = 5000) -> None:
    app = kiln.App(url)
    await app.amigrate()
    try:
        for start in range(first, first + count, batch):
            size = min(batch, first + count - start)
            await app.aenqueue_many([(KIND, args_for(i)) for i in range(start, start + size)])
    finally:
        await app.aclose()


async def fill_history(db: Db, history: int) -> None:
    await enqueue(db.url, history)
    top = db.max_id()
    for lo in range(1, top + 1, 100_000):
        db.age(lo, min(lo + 99_999, top))
    db.tidy()


async def inflow(url: str, rate: float, seconds: float, stop: threading.Event | None = None,
                 every: float = 0.05) -> int:
    """``rate`` jobs a second for ``seconds``, one batch every ``every`` seconds."""
    app = kiln.App(url)
    sent = 0
    try:
        began = time.monotonic()
        tick = 0
        while time.monotonic() - began < seconds and not (stop and stop.is_set()):
            due = int(rate * every * (tick + 1)) - int(rate * every * tick)
            await app.aenqueue_many([(KIND, args_for(sent + i)) for i in range(due)])
            sent += due
            tick += 1
            await asyncio.sleep(max(began + tick * every - time.monotonic(), 0.0))
    finally:
        await app.aclose()
    return sent


# the worker, as an operator runs it --------------------------------------------------
class Worker:
    def __init__(self, db: Db, *flags: str) -> None:
        self.db = db
        cmd = [sys.executable, "-m", "kiln.cli", "worker", "bench.scale_app:app",
               "--database-url", db.url, "--queue", "default=10", "--poll-interval", "0.05",
               "--log-level", "warning", *flags]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ))
        deadline = time.monotonic() + 60
        while not self._registered():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not register: {cmd}")
            time.sleep(0.05)

    def _registered(self) -> bool:
        try:
            return int(self.db.run("SELECT count(*) FROM kiln_servers")[0][0]) > 0
        except Exception:  # not migrated yet
            return False

    def cpu(self) -> float:
        return _procs.cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_until(check: Callable[[], bool], timeout: float, poll: float = 0.01) -> float:
    began = time.perf_counter()
    while not check():
        if time.perf_counter() - began > timeout:
            raise RuntimeError(f"not done within {timeout}s")
        time.sleep(poll)
    return time.perf_counter() - began


# the cases ----------------------------------------------------------------------------
def drain(database: str, history: int, jobs: int) -> dict[str, Any]:
    db = Db(database)
    try:
        if history:
            asyncio.run(fill_history(db, history))
        else:
            asyncio.run(enqueue(db.url, 0))  # migrates
        asyncio.run(enqueue(db.url, jobs, first=history))
        client_app = kiln.App(db.url)

        async def control(pause: bool) -> None:
            client = client_app.client()
            try:
                await (client.pause_queue("default", actor="bench") if pause
                       else client.resume_queue("default", actor="bench"))
            finally:
                await client_app.aclose()

        asyncio.run(control(True))
        worker = Worker(db)
        try:
            time.sleep(0.5)  # its pools and notifications are up
            db_before = _procs.snapshot(db.process) if db.process else {}
            cpu_before = worker.cpu()
            began = time.perf_counter()
            asyncio.run(control(False))
            wait_until(lambda: db.left() == 0, 600)
            seconds = time.perf_counter() - began
            worker_cpu = worker.cpu() - cpu_before
            db_cpu = _procs.delta(db_before, _procs.snapshot(db.process)) if db.process else 0.0
        finally:
            worker.stop()
        return {"case": "drain", "database": database, "history": history, "jobs": jobs,
                "seconds": round(seconds, 3), "jobs_per_s": round(jobs / seconds, 1),
                "worker_cpu_s_per_1000": round(worker_cpu / jobs * 1000, 4),
                "db_cpu_s_per_1000": round(db_cpu / jobs * 1000, 4), **db.sizes()}
    finally:
        db.drop()


def _percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 2) if ordered else None


def flow(db: Db, rate: float, seconds: float, sampler: threading.Thread,
         stop: threading.Event, worker: Worker) -> int:
    """Inflow at ``rate`` for ``seconds`` with ``sampler`` running, until every job ran;
    then the sampler (told by ``stop``) and the worker end. Returns the jobs sent."""
    try:
        sampler.start()
        sent = asyncio.run(inflow(db.url, rate, seconds))
        wait_until(lambda: db.left() == 0, 120)
    finally:
        stop.set()
        sampler.join()
        worker.stop()
    return sent


def prune(database: str, history: int, rate: float, window: float, pruning: bool
          ) -> dict[str, Any]:
    db = Db(database)
    try:
        asyncio.run(fill_history(db, history))
        top = db.max_id()
        flags = (["--prune-completed-after", "1h", "--prune-failed-after", "1h",
                  "--prune-interval", "1s"] if pruning else
                 ["--prune-completed-after", "1000h", "--prune-interval", "1s"])
        progress: list[tuple[float, int]] = []
        waits: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            last = 0.0
            while not stop.is_set():
                waits.append(db.lock_waits())
                if time.time() - last >= 1.0:
                    last = time.time()
                    progress.append((last, db.history_left()))
                stop.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        worker = Worker(db, *flags)
        began = time.time()  # registered: its pruner starts with its leadership
        sent = flow(db, rate, window, sampler, stop, worker)
        progress.append((time.time(), db.history_left()))
        done_at = next((t for t, n in progress if n == 0), None)
        pickups = db.pickups_ms(top)
        during = [ms for at, ms in pickups if done_at is None or at <= done_at]
        deleted = history - progress[-1][1]
        prune_seconds = (done_at or progress[-1][0]) - began
        return {"case": "prune", "database": database, "history": history,
                "pruning": pruning, "inflow_per_s": rate, "window_s": window,
                "inflow_jobs": sent, "picked_up": len(pickups),
                "picked_up_while_pruning": len(during),
                "pickup_p50_ms": _percentile(during, 0.5),
                "pickup_p99_ms": _percentile(during, 0.99),
                "pickup_max_ms": _percentile(during, 1.0),
                "pruned": deleted, "pruned_all_in_s": None if done_at is None
                else round(done_at - began, 1),
                "prune_rows_per_s": round(deleted / prune_seconds, 1) if pruning else 0.0,
                "lock_wait_samples": sum(1 for w in waits if w), "samples": len(waits)}
    finally:
        db.drop()


def steady(database: str, rate: float, seconds: float, retention: float, every: float
           ) -> list[dict[str, Any]]:
    db = Db(database)
    try:
        asyncio.run(enqueue(db.url, 0))  # migrates
        worker = Worker(db, "--prune-completed-after", f"{retention}s",
                        "--prune-interval", "10s")
        samples: list[dict[str, Any]] = []
        stop = threading.Event()

        def sample() -> None:
            began = time.monotonic()
            while not stop.wait(every):
                row = {"case": "steady", "database": database,
                       "minute": round((time.monotonic() - began) / 60, 1), **db.sizes()}
                samples.append(row)
                print(json.dumps(row), flush=True)

        sampler = threading.Thread(target=sample, daemon=True)
        with db.default_autovacuum() as server_setting:
            sent = flow(db, rate, seconds, sampler, stop, worker)
        samples.append({"case": "steady", "database": database, "end": True, "sent": sent,
                        "retention_s": retention, "server_autovacuum": server_setting,
                        **db.sizes()})
        return samples
    finally:
        db.drop()


def _backlog(a: argparse.Namespace) -> dict[str, Any]:
    """The backlog case on each of ``--stores`` in turn (one JSON line each)."""
    summary: dict[str, Any] = {}
    for store in a.stores.split(","):
        backlog = scale_backlog.run(a.rows, a.claims, a.due_window,
                                    set(a.backlog_parts.split(",")), store=store,
                                    keep=a.backlog_keep, reuse=a.backlog_reuse)
        print(json.dumps(backlog, default=str), flush=True)
        kind = backlog["database"]
        for key in ("fill_rows_per_s", "enqueue_big_over_fresh", "drain_big_over_fresh",
                    "drain_cpu_fresh_over_big"):
            if key in backlog:
                summary[f"backlog_{kind}_{key}"] = backlog[key]
        if "claim" in backlog:
            summary[f"backlog_{kind}_claim_p99_ms"] = backlog["claim"]["claim_p99_ms"]
        if "release" in backlog:
            summary[f"backlog_{kind}_overdue_by_1s_max"] = backlog["release"][
                "overdue_by_1s_max"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", default="postgresql",
                        choices=("postgresql", "mariadb", "sqlite"))
    parser.add_argument("--cases", default="drain,prune,steady")
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--window", type=float, default=40.0)
    parser.add_argument("--steady", type=float, default=3600.0)
    parser.add_argument("--retention", type=float, default=300.0)
    parser.add_argument("--sample", type=float, default=60.0)
    parser.add_argument("--rows", type=int, default=10_000_000,
                        help="backlog: jobs waiting (half available, half scheduled)")
    parser.add_argument("--claims", type=int, default=200,
                        help="backlog: claims of 10 timed per queue")
    parser.add_argument("--due-window", type=float, default=60.0,
                        help="backlog: seconds over which 100,000 scheduled jobs fall due")
    parser.add_argument("--stores", default=None,
                        help="backlog: the stores to measure, e.g. postgresql,mariadb,sqlite"
                        " (default: --database)")
    parser.add_argument("--backlog-parts", default=",".join(scale_backlog.PARTS))
    parser.add_argument("--drain-queue", type=int, default=3,
                        help="backlog: the queue (0-19) the drain part drains")
    parser.add_argument("--backlog-keep", action="store_true",
                        help="backlog: keep the big table's database (its URL is printed)")
    parser.add_argument("--backlog-reuse", metavar="URL",
                        help="backlog: measure a database kept by --backlog-keep (no build;"
                        " --rows must be the rows it was built with)")
    a = parser.parse_args()
    cases = a.cases.split(",")
    summary: dict[str, Any] = {"summary": True, "database": a.database}
    if "backlog" in cases:
        a.stores = a.stores or a.database
        scale_backlog.DRAIN_QUEUE = a.drain_queue
        if a.backlog_reuse and "," in a.stores:
            parser.error("--backlog-reuse measures one store's database (one --stores)")
        summary.update(_backlog(a))
    if "drain" in cases:
        fresh: list[float] = []
        aged: list[float] = []
        for _ in range(a.runs):
            for history, into in ((0, fresh), (a.history, aged)):
                result = drain(a.database, history, a.jobs)
                print(json.dumps(result), flush=True)
                into.append(result["jobs_per_s"])
        summary["drain_aged_over_fresh"] = round(
            statistics.median(aged) / statistics.median(fresh), 3)
    if "prune" in cases:
        quiet = prune(a.database, a.history, a.rate, a.window, pruning=False)
        print(json.dumps(quiet), flush=True)
        busy = prune(a.database, a.history, a.rate, a.window, pruning=True)
        print(json.dumps(busy), flush=True)
        if busy["pickup_p99_ms"] is not None and quiet["pickup_p99_ms"]:
            summary["pickup_p99_pruning_over_not"] = round(
                busy["pickup_p99_ms"] / quiet["pickup_p99_ms"], 2)
        summary["prune_rows_per_s_over_inflow"] = round(busy["prune_rows_per_s"] / a.rate, 1)
        summary["lock_wait_samples_while_pruning"] = busy["lock_wait_samples"]
    if "steady" in cases:
        rows = steady(a.database, a.rate, a.steady, a.retention, a.sample)
        print(json.dumps(rows[-1]), flush=True)
        half = [r for r in rows[:-1] if r["minute"] * 60 >= a.steady / 2]
        key = "file_mb" if a.database == "sqlite" else "indexes_mb"
        if half:
            summary[f"steady_{key}_second_half"] = [half[0][key], half[-1][key]]
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
