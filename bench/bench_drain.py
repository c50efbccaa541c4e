"""Drain benchmark: N no-op jobs, one worker process, side by side with peers.

Reports jobs/s, worker CPU seconds per 1,000 jobs and database CPU seconds per 1,000
jobs for kiln and, in the same run, pgqueuer and procrastinate (from the peers'
virtualenv, see bench/peers/setup.sh), each with the same workload and concurrency.
Prints one JSON object per system and run, then a summary with ratios. The clock runs
from the worker's start (its own start-up included) until the harness, looking every
10 ms on one kept connection, sees no job left; that connection's database CPU is
left out of the database figure.

    python -m bench.bench_drain --jobs 20000 --concurrency 10 --runs 3

With ``--finished-rows N`` every system also drains, in the same run, beside N finished
jobs kept in its own tables the way it keeps them (``bench/drain_history.py`` says what
each keeps), then VACUUM ANALYZE. The history is built once per system into a template
database, and each such drain runs on a copy of it (``CREATE DATABASE ... TEMPLATE``),
so every run starts from the same table; the jobs to drain are enqueued after the
ANALYZE, as they would be on a table whose last autovacuum saw only finished jobs (N
jobs more than the threshold, 10% of the table, would have to change to trigger another).
Fresh and full alternate in each run (the first run fresh first, the next full first).
The summary has each system's full/fresh ratio and kiln's margin over each peer on both.

    python -m bench.bench_drain --jobs 20000 --runs 3 --finished-rows 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import _procs

ROOT = Path(__file__).resolve().parents[1]
PG = os.environ.get("KILN_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
MYSQL = os.environ.get("KILN_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
PEERS = os.environ.get("KILN_PEERS_VENV", "/tmp/kiln-peers")


def pg_execute(sql: str, url: str = PG) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else []


def fresh_database(prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    pg_execute(f"CREATE DATABASE {name}")
    return PG.rsplit("/", 1)[0] + "/" + name


def clone_database(template: str, prefix: str) -> str:
    """A new database copied from ``template``'s (which must have no session open)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    pg_execute(f"CREATE DATABASE {name} TEMPLATE {template.rsplit('/', 1)[1]}"
               " STRATEGY FILE_COPY")
    return PG.rsplit("/", 1)[0] + "/" + name


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    pg_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def my_execute(sql: str, url: str = MYSQL) -> list[tuple[Any, ...]]:
    from urllib.parse import urlsplit

    import pymysql

    p = urlsplit(url)
    conn = pymysql.connect(host=p.hostname, port=p.port or 3306, user=p.username or "root",
                           password=p.password or "", database=p.path.lstrip("/"),
                           autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()


def fresh_mysql_database(prefix: str) -> str:
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    my_execute(f"CREATE DATABASE {name}")
    return MYSQL.rsplit("/", 1)[0] + "/" + name


def drop_mysql_database(url: str) -> None:
    my_execute(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]}")


class PgProbe:
    """Counts the jobs left on one kept connection, every POLL seconds. Its backend's CPU
    is measured, so that the database CPU of a run leaves the probing out."""

    def __init__(self, url: str, sql: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.sql = sql
        self.pid = self.conn.info.backend_pid

    def remaining(self) -> int:
        row = self.conn.execute(self.sql, prepare=True).fetchone()
        return int(row[0]) if row else 0

    def cpu(self) -> float:
        return _procs.cpu_seconds(self.pid)

    def close(self) -> None:
        self.conn.close()


POLL = 0.01  # seconds between two looks at what is left


def measure(
    name: str, cmd: list[str], remaining: Callable[[], int], jobs: int, db_process: str | None,
    env: dict[str, str] | None = None, timeout: float = 600.0,
    probe_cpu: Callable[[], float] = lambda: 0.0, poll: float = POLL,
) -> dict[str, Any]:
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdin is not None and proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{name} worker failed to start: {line!r}")
    db_before = _procs.snapshot(db_process) if db_process else {}  # None: in the worker
    probe_before = probe_cpu()
    worker_before = _procs.cpu_seconds(proc.pid)
    began = time.perf_counter()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    while remaining() > 0:
        if time.perf_counter() - began > timeout:
            proc.kill()
            raise RuntimeError(f"{name} did not drain within {timeout}s")
        time.sleep(poll)
    elapsed = time.perf_counter() - began
    worker_cpu = _procs.cpu_seconds(proc.pid) - worker_before
    db_after = _procs.snapshot(db_process) if db_process else {}
    db_cpu = _procs.delta(db_before, db_after) - (probe_cpu() - probe_before)
    proc.kill()
    proc.wait()
    return {
        "system": name,
        "jobs": jobs,
        "seconds": round(elapsed, 3),
        "jobs_per_s": round(jobs / elapsed, 1),
        "worker_cpu_s_per_1000": round(worker_cpu / jobs * 1000, 4),
        "db_cpu_s_per_1000": round(db_cpu / jobs * 1000, 4),
    }


def run_kiln(
    jobs: int, concurrency: int, observe: bool = False, mysql: bool = False,
    template: str | None = None,
) -> dict[str, Any]:
    import asyncio

    import kiln
    from kiln.stores import store_from_url

    execute, drop = (my_execute, drop_mysql_database) if mysql else (pg_execute, drop_database)
    url = (fresh_mysql_database("kiln_bench") if mysql
           else clone_database(template, "kiln_bench") if template
           else fresh_database("kiln_bench"))
    try:
        async def fill() -> None:
            store = store_from_url(url)
            await store.open()
            await store.migrate()
            client = kiln.Client(store)
            for start in range(0, jobs, 1000):
                await client.enqueue_many(
                    [client.build("noop", {"n": i}) for i in range(start, min(start + 1000, jobs))]
                )
            await store.close()

        asyncio.run(fill())

        left = "SELECT count(*) FROM kiln_jobs WHERE state <> 'completed'"
        left_pg = (  # 0 once drained; two index probes, so that polling costs little
            # (conc_key IS NULL: the claim index is partial; without it a planner whose
            # statistics see only finished jobs scans the whole table)
            "SELECT (EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'available'"
            " AND conc_key IS NULL))::int"
            " + (EXISTS (SELECT 1 FROM kiln_jobs WHERE state = 'running'))::int"
        )
        cmd = [sys.executable, "-m", "bench.drain_kiln", url, str(concurrency)]
        if observe:
            cmd.append("observe")
        name = "kiln-mariadb" if mysql else "kiln+otel" if observe else "kiln"
        if mysql:
            return measure(name, cmd, lambda: int(execute(left, url)[0][0]), jobs, "mariadbd",
                           poll=0.05)
        probe = PgProbe(url, left_pg)
        try:
            return measure(name, cmd, probe.remaining, jobs, "postgres", probe_cpu=probe.cpu)
        finally:
            probe.close()
    finally:
        drop(url)


def peer_python() -> Path:
    python = Path(PEERS) / "bin" / "python"
    if not python.exists():
        raise RuntimeError(f"peers' venv missing: run bash bench/peers/setup.sh {PEERS}")
    return python


def peer_script(peer: str) -> str:
    return str(ROOT / "bench" / "peers" / f"drain_{peer}.py")


def build_template(system: str, rows: int) -> dict[str, Any]:
    """A database of ``system``'s schema holding ``rows`` finished jobs, VACUUM ANALYZEd."""
    from bench import drain_history

    url = fresh_database(f"{system}_tmpl")
    try:
        began = time.perf_counter()
        if system != "kiln":
            subprocess.run([str(peer_python()), peer_script(system), url, "install", "0"],
                           check=True, cwd=ROOT)
        drain_history.HISTORY[system](url, rows)
        return {"template": url, "system": system, "finished_rows": rows,
                "built_s": round(time.perf_counter() - began, 1),
                **drain_history.sizes(url, drain_history.TABLES[system])}
    except BaseException:
        drop_database(url)
        raise


def run_peer(peer: str, jobs: int, concurrency: int, template: str | None = None
             ) -> dict[str, Any]:
    python = peer_python()
    url = clone_database(template, f"{peer}_bench") if template else fresh_database(
        f"{peer}_bench")
    script = peer_script(peer)
    try:
        subprocess.run([str(python), script, url, "enqueue" if template else "fill", str(jobs)],
                       check=True, cwd=ROOT)
        count_sql = {  # 0 once drained; index probes (the finished rows are not read)
            "pgqueuer": "SELECT EXISTS (SELECT 1 FROM pgqueuer)::int",
            "procrastinate": "SELECT EXISTS (SELECT 1 FROM procrastinate_jobs"
            " WHERE status = ANY (ARRAY['todo', 'doing']::procrastinate_job_status[]))::int",
        }[peer]

        cmd = [str(python), script, url, "work", str(concurrency)]
        probe = PgProbe(url, count_sql)
        try:
            return measure(peer, cmd, probe.remaining, jobs, "postgres", probe_cpu=probe.cpu)
        finally:
            probe.close()
    finally:
        drop_database(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--systems", default="kiln,pgqueuer,procrastinate")
    parser.add_argument("--finished-rows", type=int, default=0,
                        help="also drain beside this many finished jobs in each system's"
                        " own tables (PostgreSQL systems: kiln, pgqueuer, procrastinate)")
    parser.add_argument("--jobs-for", default="",
                        help="another job count for some systems, e.g. procrastinate=2000"
                        " (a slow peer on a loaded machine); its rate is still jobs/s")
    args = parser.parse_args()
    jobs_for = {name: int(n) for name, n in
                (item.split("=") for item in args.jobs_for.split(",") if item)}
    systems = args.systems.split(",")
    rows = args.finished_rows
    if rows and not set(systems) <= {"kiln", "pgqueuer", "procrastinate"}:
        parser.error("--finished-rows takes kiln, pgqueuer and procrastinate only")
    full = [f"{s}@full" for s in systems] if rows else []
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in systems + full}
    templates: dict[str, str] = {}
    try:
        for system in systems if rows else []:
            built = build_template(system, rows)
            templates[system] = built["template"]
            print(json.dumps(built), flush=True)
        for run in range(args.runs):
            for system in systems:  # interleaved, so drift hits every system alike
                tables = [None, templates.get(system)] if rows else [None]
                for template in tables if run % 2 == 0 else tables[::-1]:
                    result = drain_once(system, jobs_for.get(system, args.jobs),
                                        args.concurrency, template)
                    result["finished_rows"] = rows if template else 0
                    results[f"{system}@full" if template else system].append(result)
                    print(json.dumps(result), flush=True)
    finally:
        for url in templates.values():
            drop_database(url)
    summarize(results, rows)


def drain_once(system: str, jobs: int, concurrency: int, template: str | None
               ) -> dict[str, Any]:
    if system == "kiln":
        return run_kiln(jobs, concurrency, template=template)
    if system == "kiln-mariadb":
        return run_kiln(jobs, concurrency, mysql=True)
    if system == "kiln+otel":
        return run_kiln(jobs, concurrency, observe=True)
    return run_peer(system, jobs, concurrency, template)


def _ratios(a: list[float], b: list[float]) -> dict[str, Any]:
    each = [round(x / y, 3) for x, y in zip(a, b, strict=True)]
    return {"runs": each, "median": statistics.median(each)}


def summarize(results: dict[str, list[dict[str, Any]]], rows: int) -> None:
    summary: dict[str, Any] = {"summary": {}}
    for system, runs in results.items():
        summary["summary"][system] = {
            key: statistics.median(r[key] for r in runs)
            for key in ("jobs_per_s", "worker_cpu_s_per_1000", "db_cpu_s_per_1000")
        }
    if "kiln" in results:
        base = summary["summary"]["kiln"]
        summary["ratios_vs_kiln"] = {
            system: {
                "kiln_speedup": round(base["jobs_per_s"] / s["jobs_per_s"], 2),
                "worker_cpu_ratio": round(
                    s["worker_cpu_s_per_1000"] / base["worker_cpu_s_per_1000"], 2
                ) if base["worker_cpu_s_per_1000"] else None,
                "db_cpu_ratio": round(s["db_cpu_s_per_1000"] / base["db_cpu_s_per_1000"], 2)
                if base["db_cpu_s_per_1000"] else None,
            }
            for system, s in summary["summary"].items()
            if system != "kiln" and not system.endswith("@full")
        }
    if rows:
        medians = summary["summary"]
        summary["finished_rows"] = rows
        summary["full_over_fresh"] = {  # jobs/s beside the history / on a fresh table
            system: round(medians[f"{system}@full"]["jobs_per_s"] / s["jobs_per_s"], 3)
            for system, s in medians.items() if f"{system}@full" in medians
        }
        # the same, run by run (the two drains of a run are minutes apart, the medians'
        # may come from different runs): each run's ratio, and their median
        rate = {s: [r["jobs_per_s"] for r in runs] for s, runs in results.items()}
        summary["full_over_fresh_by_run"] = {
            system: _ratios(rate[f"{system}@full"], rate[system])
            for system in medians if f"{system}@full" in medians
        }
        if "kiln@full" in medians:
            summary["kiln_speedup_by_run"] = {
                peer: {"fresh": _ratios(rate["kiln"], rate[peer]),
                       "full": _ratios(rate["kiln@full"], rate[f"{peer}@full"])}
                for peer in medians
                if peer != "kiln" and not peer.endswith("@full")
            }
            summary["kiln_speedup"] = {  # kiln's jobs/s over the peer's, on each table
                peer: {
                    "fresh": round(medians["kiln"]["jobs_per_s"] / s["jobs_per_s"], 2),
                    "full": round(medians["kiln@full"]["jobs_per_s"]
                                  / medians[f"{peer}@full"]["jobs_per_s"], 2),
                }
                for peer, s in medians.items()
                if peer != "kiln" and not peer.endswith("@full")
            }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
