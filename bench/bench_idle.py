"""Idle cost: queries per second of one API process and two idle worker processes.

On SQLite, PostgreSQL and MySQL/MariaDB, with the default poll_interval (1 s) and with
200 ms, with and without notifications (LISTEN/NOTIFY on PostgreSQL, a RedisBus on the
others; "without" switches a PostgreSQL store's LISTEN off). Every process counts the statements its
store sent (``store.query_count()``) over the same window after a warm-up; on
PostgreSQL the database's own count of committed transactions
(pg_stat_database.xact_commit of a database of the benchmark's own) is reported
beside it. Workers run the default ServerConfig apart from poll_interval, one queue,
and one of them is the leader. Prints one JSON object per setup, then a Markdown
table (``--table FILE`` writes it into FILE between the idle-cost markers).

    python -m bench.bench_idle [--window 20] [--warmup 5] [--table docs/idle-cost.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.bench_drain import drop_database, fresh_database, pg_execute

ROOT = Path(__file__).resolve().parents[1]
MYSQL = os.environ.get("KILN_BENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
BEGIN, END = "<!-- idle-cost:begin -->", "<!-- idle-cost:end -->"


def xact_commit(url: str) -> int:
    name = url.rsplit("/", 1)[1]
    rows = pg_execute(f"SELECT xact_commit FROM pg_stat_database WHERE datname = '{name}'")
    return int(rows[0][0])


def mysql_execute(sql: str) -> None:
    import pymysql  # type: ignore[import-untyped,unused-ignore]

    parts = urlsplit(MYSQL)
    conn = pymysql.connect(host=parts.hostname or "127.0.0.1", port=parts.port or 3306,
                           user=parts.username or "root", password=parts.password or "")
    with conn.cursor() as cur:
        cur.execute(sql)
    conn.close()


def fresh(backend: str, poll: float, notify: bool, tmp: Path) -> str:
    if backend == "postgres":
        return fresh_database("kiln_idle")
    if backend == "mysql":
        name = f"kiln_idle_{uuid.uuid4().hex[:8]}"
        mysql_execute(f"CREATE DATABASE {name}")
        return urlunsplit(urlsplit(MYSQL)._replace(path=f"/{name}"))
    return f"sqlite:///{tmp / f'idle-{poll}-{notify}.db'}"


def drop(backend: str, url: str) -> None:
    if backend == "postgres":
        drop_database(url)
    elif backend == "mysql":
        mysql_execute(f"DROP DATABASE {url.rsplit('/', 1)[1]}")


def start(url: str, role: str, poll: float, notify: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.idle_proc", url, role, str(poll), "on" if notify else "off"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise RuntimeError(f"{role} did not start: {line!r}")
    ready: dict[str, Any] = json.loads(line.split(" ", 1)[1])
    if role == "worker" and ready["notifications"] is not notify:
        raise RuntimeError(f"worker notifications {ready['notifications']}, wanted {notify}")
    return proc


def tell(proc: subprocess.Popen[str], word: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(word + "\n")
    proc.stdin.flush()


def setup(backend: str, poll: float, notify: bool, warmup: float, window: float,
          tmp: Path) -> dict[str, Any]:
    url = fresh(backend, poll, notify, tmp)
    subprocess.run([sys.executable, "-c", f"import kiln; kiln.App({url!r}).migrate()"],
                   check=True, cwd=ROOT)
    procs = {"api": start(url, "api", poll, notify)}
    procs.update({f"worker{i}": start(url, "worker", poll, notify) for i in (1, 2)})
    try:
        time.sleep(warmup)
        commits = xact_commit(url) if backend == "postgres" else 0
        began = time.monotonic()
        for proc in procs.values():
            tell(proc, "start")
        time.sleep(window)
        for proc in procs.values():
            tell(proc, "stop")
        elapsed = time.monotonic() - began
        commits = xact_commit(url) - commits - 1 if backend == "postgres" else 0
        counts = {}
        for name, proc in procs.items():
            out, _ = proc.communicate(timeout=60)
            got = json.loads(out.strip().splitlines()[-1])
            counts[name] = round(got["queries"] / got["seconds"], 1)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        drop(backend, url)
    result: dict[str, Any] = {
        "backend": backend, "poll_interval": poll, "notifications": notify,
        "queries_per_s": round(sum(counts.values()), 1), "per_process": counts,
    }
    if backend == "postgres":
        result["xact_commit_per_s"] = round(commits / elapsed, 1)
    return result


def table(results: list[dict[str, Any]]) -> str:
    names = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}
    lines = [
        "| Store | poll_interval | Notifications | Queries/s (all 3 processes) | per worker "
        "| API process | PostgreSQL xact_commit/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        how = ("LISTEN/NOTIFY" if r["backend"] == "postgres" else "RedisBus") \
            if r["notifications"] else "none"
        p = r["per_process"]
        lines.append(
            f"| {names[r['backend']]} | {r['poll_interval']:g} s | {how} "
            f"| {r['queries_per_s']:.1f} | {p['worker1']:.1f} / {p['worker2']:.1f} "
            f"| {p['api']:.1f} | {r.get('xact_commit_per_s', '-')} |"
        )
    return "\n".join(lines)


def write_table(path: Path, text: str) -> None:
    doc = path.read_text()
    head, rest = doc.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--backends", default="sqlite,postgres,mysql")
    parser.add_argument("--table", type=Path, default=None)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            for poll in (1.0, 0.2):
                for notify in (False, True):
                    result = setup(backend, poll, notify, args.warmup, args.window, Path(tmp))
                    print(json.dumps(result), flush=True)
                    results.append(result)
    text = table(results)
    print(text)
    if args.table is not None:
        write_table(args.table, text)


if __name__ == "__main__":
    main()
