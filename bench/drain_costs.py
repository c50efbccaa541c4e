"""What one queue's drain costs the database with a large backlog beside it, and alone
(PostgreSQL; issue #45, why the backlog case's drain ratio moves).

The big table is ``bench/scale_backlog.py``'s backlog (``--rows`` jobs, half available
in 20 queues and 100 kinds, half scheduled), built once and kept (``--keep``) or
reused (``--reuse URL``); each ``--queues`` entry drains that queue's available jobs
from it (4 claimers of 100, completing each batch, as the backlog case does) and, in
alternating order, the same jobs alone in a fresh table. Each drain prints one JSON
line: its rate, claim and apply latencies, and its costs per job, which unlike the rate
do not move with the machine's load: heap and index blocks hit and read from outside
shared_buffers, dirty buffers the backends wrote out themselves, WAL records, full-page
images and bytes (pg_stat_wal is the server's: other databases' writes count too),
entries the claim index returned, the claiming backends' CPU time (from /proc, so the
bench must run on the database's host), and the oldest snapshot seen meanwhile.
``--rows`` must be the big table's when it is reused (the fresh table gets its queue's
share of them). ``--per-kind``: each claimer asks for one kind at a time (the design
ADR 0017 rejects). ``--by-queue``: the big table built with each queue's available
jobs contiguous (the layout, not the size, is what the interleaved table pays for).
``--hold-snapshot``: a REPEATABLE READ transaction of another session stays open in the
database through each drain. ``--claim-split N``: instead of draining, N claims of 10
from each table, timed by the client and by the server (EXPLAIN ANALYZE EXECUTE of the
prepared generic claim, committed), with ``synchronous_commit`` on and then off.

    python -m bench.drain_costs --rows 10000000 --queues 3,4 --keep
    python -m bench.drain_costs --reuse postgresql://.../kiln_backlog_x --queues 5,6
    python -m bench.drain_costs --reuse postgresql://.../kiln_backlog_x --queues 13 \\
        --claim-split 200
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import time
from typing import Any

import psycopg

from bench import scale_backlog as sb
from bench.backlog_stores import Target
from bench.bench_drain import drop_database, fresh_database, pg_execute
from kiln.stores import store_from_url
from kiln.stores.postgres import _jobs

TICK = os.sysconf("SC_CLK_TCK")
TABLE = ("SELECT io.heap_blks_read, io.heap_blks_hit, io.idx_blks_read, io.idx_blks_hit,"
         " t.n_tup_upd, t.n_tup_hot_upd FROM pg_statio_user_tables io"
         " JOIN pg_stat_user_tables t USING (relid) WHERE t.relname = 'kiln_jobs'")
SERVER = ("SELECT w.wal_records, w.wal_fpi, w.wal_bytes, b.buffers_backend,"
          " b.checkpoints_timed + b.checkpoints_req FROM pg_stat_wal w, pg_stat_bgwriter b")
CLAIM_INDEX = ("SELECT idx_tup_read, idx_tup_fetch FROM pg_stat_user_indexes"
               " WHERE indexrelname = 'kiln_jobs_claim'")
BACKENDS = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
HORIZON = ("SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity"
           " WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()")
NAMES = ("heap_read", "heap_hit", "index_read", "index_hit", "updates", "hot_updates",
         "wal_records", "wal_fpi", "wal_bytes", "backend_writes", "checkpoints",
         "claim_index_read", "claim_index_fetch")


def counters(url: str) -> list[float]:
    return [float(v) for v in (*pg_execute(TABLE, url)[0], *pg_execute(SERVER, url)[0],
                               *pg_execute(CLAIM_INDEX, url)[0])]


def backend_cpu(url: str) -> dict[int, float]:
    out: dict[int, float] = {}
    for (pid,) in pg_execute(BACKENDS, url):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / TICK
    return out


async def drain(url: str, queue: int, per_kind: bool, claimers: int = 4) -> dict[str, Any]:
    store = store_from_url(url, max_conns=claimers + 1)
    await store.open()
    kinds = sb.kinds_of(queue)
    count = 0
    claims: list[float] = []
    applies: list[float] = []
    horizon: list[int] = []
    stop = asyncio.Event()

    async def claimer() -> None:
        nonlocal count
        left = list(kinds)
        while True:
            began = time.perf_counter()
            rows = await store.job_claim(f"q{queue}", left[:1] if per_kind else kinds, 100,
                                         sb.SERVER)
            claims.append((time.perf_counter() - began) * 1000)
            if not rows and per_kind and len(left) > 1:
                left.pop(0)
                continue
            if not rows:
                return
            began = time.perf_counter()
            await store.job_results_apply(sb.done(rows))
            applies.append((time.perf_counter() - began) * 1000)
            count += len(rows)

    async def watch() -> None:  # the oldest snapshot on the server, every 0.5 s
        while not stop.is_set():
            horizon.append(int((await asyncio.to_thread(pg_execute, HORIZON, url))[0][0]))
            await asyncio.sleep(0.5)

    before = counters(url)
    load = os.getloadavg()[0]
    watcher = asyncio.create_task(watch())
    try:
        await store.job_claim(f"q{queue}", ["no-such-kind"], 1, sb.SERVER)  # connections up
        cpu0 = backend_cpu(url)
        began = time.perf_counter()
        await asyncio.gather(*(claimer() for _ in range(claimers)))
        seconds = time.perf_counter() - began
        cpu1 = backend_cpu(url)
    finally:
        stop.set()
        await watcher
        await store.close()
    after = counters(url)
    jobs = max(count, 1)
    per_job = {n: round((b - a) / jobs, 3) for n, a, b in zip(NAMES, before, after,
                                                                   strict=True)}
    at = NAMES.index("checkpoints")
    per_job["checkpoints"] = after[at] - before[at]
    cpu = sum(v - cpu0.get(pid, 0.0) for pid, v in cpu1.items())  # new ones: all of theirs
    return {"queue": f"q{queue}", "per_kind": per_kind, "jobs": count,
            "seconds": round(seconds, 2), "jobs_per_s": round(count / seconds, 1),
            "load_1m": [round(load, 1), round(os.getloadavg()[0], 1)],
            "claim_p50_ms": sb.pct(claims, 0.5), "claim_p99_ms": sb.pct(claims, 0.99),
            "apply_p50_ms": sb.pct(applies, 0.5), "apply_p99_ms": sb.pct(applies, 0.99),
            "backend_cpu_us_per_job": round(cpu * 1e6 / jobs, 1),
            "oldest_xmin_age_max": max(horizon, default=0), "per_job": per_job}


def claim_split(url: str, queue: int, claims: int, sync: bool) -> dict[str, Any]:
    wall: list[float] = []
    server: list[float] = []
    load = os.getloadavg()[0]
    args = ("claim-split", f"q{queue}", sb.kinds_of(queue), 10, 10)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_jobs.CLAIM_PREPARE)
        conn.execute(f"SET synchronous_commit = {'on' if sync else 'off'}")
        cur = psycopg.ClientCursor(conn)
        for _ in range(claims):
            began = time.perf_counter()
            plan = cur.execute("EXPLAIN (ANALYZE) EXECUTE kiln_claim(%s::text, %s::text,"
                               " %s::text[], %s::int, %s::int)", args).fetchall()
            wall.append((time.perf_counter() - began) * 1000)
            found = re.search(r"Execution Time: ([\d.]+)", "\n".join(r[0] for r in plan))
            server.append(float(found.group(1)) if found else float("nan"))
    return {"queue": f"q{queue}", "claims": claims, "synchronous_commit": sync,
            "load_1m": round(load, 1), "round_trip_p50_ms": sb.pct(wall, 0.5),
            "round_trip_p99_ms": sb.pct(wall, 0.99), "execution_p50_ms": sb.pct(server, 0.5),
            "execution_p99_ms": sb.pct(server, 0.99)}


def measure(url: str, queue: int, a: argparse.Namespace) -> list[dict[str, Any]]:
    if a.claim_split:
        return [claim_split(url, queue, a.claim_split, sync) for sync in (True, False)]
    held = psycopg.connect(url) if a.hold_snapshot else None
    try:
        if held is not None:  # a snapshot taken, then idle in its transaction
            held.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            held.execute("SELECT 1 FROM kiln_jobs LIMIT 1").fetchall()
        return [{"snapshot_held": held is not None,
                 **asyncio.run(drain(url, queue, a.per_kind))}]
    finally:
        if held is not None:
            held.close()


def _pg(url: str) -> Target:
    """The backlog's fill target on an existing PostgreSQL database."""
    return Target("postgresql", "kiln_backlog", url=url)


def build(rows: int, by_queue: bool) -> str:
    """``by_queue``: the available jobs inserted one queue after another, so that each
    queue's rows are contiguous (the same rows as the interleaved fill's)."""
    url = fresh_database("kiln_backlog")
    asyncio.run(sb.migrate(url))
    if by_queue:
        for q in range(sb.QUEUES):
            sb.fill(_pg(url), rows // 2, 0, only_queue=q)
        sb.fill(_pg(url), 0, rows - rows // 2)
    else:
        sb.fill(_pg(url), rows // 2, rows - rows // 2)
    return url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--queues", default="3,4", help="queues to drain, one pair each")
    parser.add_argument("--reuse", metavar="URL", help="a big table kept by --keep")
    parser.add_argument("--keep", action="store_true", help="keep the big table (URL printed)")
    parser.add_argument("--per-kind", action="store_true")
    parser.add_argument("--hold-snapshot", action="store_true")
    parser.add_argument("--by-queue", action="store_true",
                        help="build the big table with each queue's available jobs contiguous")
    parser.add_argument("--claim-split", type=int, default=0, metavar="N")
    a = parser.parse_args()
    big = a.reuse or build(a.rows, a.by_queue)
    available = a.rows // 2
    try:
        for n, q in enumerate(int(q) for q in a.queues.split(",")):
            fresh = fresh_database("kiln_backlog_fresh")
            try:
                asyncio.run(sb.migrate(fresh))
                sb.fill(_pg(fresh), available, 0, only_queue=q)
                pair = [("big", big), ("fresh", fresh)]
                for side, url in pair if n % 2 == 0 else pair[::-1]:
                    for result in measure(url, q, a):
                        print(json.dumps({"table": side, "rows": a.rows, **result}), flush=True)
            finally:
                drop_database(fresh)
    finally:
        if a.keep or a.reuse:
            print(json.dumps({"kept": big}), file=sys.stderr)
        else:
            drop_database(big)


if __name__ == "__main__":
    main()
