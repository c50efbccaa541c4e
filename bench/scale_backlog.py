"""The ``backlog`` case of ``bench/bench_scale.py`` (PostgreSQL, MariaDB and SQLite):
kiln with a large backlog in the table, each figure beside the same one on a fresh
table where it has one.

``--rows`` jobs (default 10,000,000): half available across 20 queues and 100 kinds
(kind ``k{n}`` in queue ``q{n % 20}``: five kinds a queue), half scheduled over the next
day; built with INSERT ... SELECT (bench code writes SQL directly:
bench/backlog_stores.py), then each store's statistics: on PostgreSQL VACUUM ANALYZE
(what autovacuum would have done; the table is ALTERed to ``autovacuum_enabled = on``,
but a server with ``autovacuum = off`` runs no autovacuum whatever the table says, and
the figures say which it was), on MariaDB ANALYZE TABLE, on SQLite ANALYZE. The build
reports its rows a second (``fill_rows_per_s``), so a size too slow to build here can
be extrapolated from a smaller one. Then, with the backlog in place, through the store
and the public API:

- ``claim``: ``--claims`` claims of 10 per queue (a worker's claim, completed right
  after), p50/p99/max per queue and over all (goal p99 < 5 ms), and queue q3's beside
  the same claims of q3's jobs alone in a fresh table;
- ``drain``: one queue's available jobs (250,000 at 10M) claimed and completed by 4
  claimers, beside the same jobs alone in a fresh table (goal >= 0.9), with what each
  job cost the database (``bench/drain_costs.py``): the rate ratio moves with the
  machine's load (0.54 to 1.86 over seven pairs at 10M), the CPU ratio much less;
- ``release``: 100,000 scheduled jobs made due over ``--due-window`` seconds, the
  releaser's call every 0.5 s: its cost per call and per second, and the most jobs
  ever overdue by more than 1 s, sampled every 0.25 s on another connection (goal 0:
  due jobs available within 1 s);
- ``enqueue``: ``aenqueue_many`` of 20 batches of 1,000, beside a fresh table (>= 0.8);
- ``maintenance``: each periodic read and write of the leader and the metrics (median
  of 3), and their cost per minute at their default intervals;
- ``dashboard``: pages and API calls through the ASGI app (median of 3, goal < 200 ms);
- ``list_all``: ``kiln jobs list --all`` over up to 1,000,000 rows: rows a second, the
  child's peak RSS and its progress line on stderr.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

import kiln
from bench import drain_costs
from bench.backlog_stores import LEAD, Target
from kiln._model._job import KIND_COUNT_CAP, JobResult, JobState, Outcome
from kiln.stores import store_from_url
from kiln.web import create_app

PARTS = ("claim", "dashboard", "maintenance", "enqueue", "list_all", "release", "drain")
LIVE = (JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
        JobState.RUNNING, JobState.FAILED)  # kilnotel._counts.LIVE_STATES
QUEUES = 20
KINDS = 100
SERVER = "bench-backlog"
COUNT_CAP = 100  # what kilnotel and the dashboard ask for (kilnotel._counts)
GOAL_CLAIM_P99_MS = 5.0
GOAL_PAGE_MS = 200.0
# the queue drained (and claimed alone in the fresh table): bench_scale's --drain-queue,
# so a kept table whose q3 was drained can drain another
DRAIN_QUEUE = 3


def kinds_of(queue: int) -> list[str]:
    return [f"k{k}" for k in range(KINDS) if k % QUEUES == queue]


def log(message: str) -> None:
    print(f"[backlog {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def migrate(url: str) -> None:
    app = kiln.App(url)
    try:
        await app.amigrate()
    finally:
        await app.aclose()


def fill(db: Target, available: int, scheduled: int, only_queue: int | None = None) -> float:
    """The backlog: ``available`` jobs (of queue ``only_queue``'s share only, when
    given) and ``scheduled`` ones over the next day; seconds it took."""
    began = time.perf_counter()
    db.prepare()
    for lo in range(1, available + 1, db.chunk):
        hi = min(lo + db.chunk - 1, available)
        db.insert_available(lo, hi, QUEUES, KINDS, only_queue)
        log(f"{db.kind} available {hi:,}/{available:,}")
    for lo in range(1, scheduled + 1, db.chunk):
        hi = min(lo + db.chunk - 1, scheduled)
        db.insert_scheduled(lo, hi, scheduled, QUEUES, KINDS)
        log(f"{db.kind} scheduled {hi:,}/{scheduled:,}")
    db.analyze()
    return time.perf_counter() - began


def open_store(url: str, conns: int) -> Any:
    """The store of ``url``, with a pool of ``conns`` where it has one (SQLite has not)."""
    if url.startswith("sqlite"):
        return store_from_url(url)
    return store_from_url(url, max_conns=conns)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 3)


def done(rows: list[Any]) -> list[JobResult]:
    return [JobResult(job_id=r.id, server_id=SERVER, attempt=r.attempt,
                      outcome=Outcome.COMPLETED, claimed_at=r.attempted_at) for r in rows]


async def claims(url: str, per_queue: int, only: int | None = None) -> dict[str, Any]:
    store = open_store(url, 2)
    await store.open()
    everything: list[float] = []
    queues: dict[str, Any] = {}
    try:
        for q in range(QUEUES) if only is None else [only]:
            kinds = kinds_of(q)
            times = []
            for _ in range(per_queue):
                began = time.perf_counter()
                rows = await store.job_claim(f"q{q}", kinds, 10, SERVER)
                times.append((time.perf_counter() - began) * 1000)
                await store.job_results_apply(done(rows))
            everything += times
            queues[f"q{q}"] = {"p50_ms": pct(times, 0.5), "p99_ms": pct(times, 0.99),
                               "max_ms": round(max(times), 3)}
    finally:
        await store.close()
    p99 = pct(everything, 0.99)
    return {"claims": len(everything), "claim_p50_ms": pct(everything, 0.5),
            "claim_p99_ms": p99, "claim_max_ms": round(max(everything), 3),
            "claim_p99_goal_met": p99 < GOAL_CLAIM_P99_MS,
            "worst_queue_p99_ms": max(v["p99_ms"] for v in queues.values()), "queues": queues}


async def drain_any(url: str, queue: int, claimers: int = 4) -> dict[str, Any]:
    """Drain one queue through the store (MariaDB, SQLite: no backend counters)."""
    store = open_store(url, claimers + 1)
    await store.open()
    kinds = kinds_of(queue)
    count = 0

    async def claimer() -> None:
        nonlocal count
        while rows := await store.job_claim(f"q{queue}", kinds, 100, SERVER):
            await store.job_results_apply(done(rows))
            count += len(rows)

    try:
        began = time.perf_counter()
        await asyncio.gather(*(claimer() for _ in range(claimers)))
        seconds = time.perf_counter() - began
    finally:
        await store.close()
    return {"jobs": count, "seconds": round(seconds, 2), "jobs_per_s": round(count / seconds, 1)}


async def drain(db: Target, queue: int) -> dict[str, Any]:
    """Drain one queue: on PostgreSQL with the backend's per-job costs (bench.drain_costs)."""
    if db.kind == "postgresql":
        return await drain_costs.drain(db.url, queue, per_kind=False)
    return await drain_any(db.url, queue)


async def release(db: Target, due: int, window: float) -> dict[str, Any]:
    """``due`` scheduled jobs fall due over ``window`` seconds, starting ``LEAD`` s
    after the setup began; ``setup_s`` says how long the setup took of it."""
    url = db.url
    began_setup = time.perf_counter()
    db.make_due(due, window)
    overdue = db.overdue_sql()
    store = open_store(url, 2)
    await store.open()
    calls: list[float] = []
    overdue_max = 0
    released = 0
    stop = asyncio.Event()

    async def sample() -> None:  # apart from the releaser, so it never slows it
        nonlocal overdue_max
        while not stop.is_set():
            late = await asyncio.to_thread(db.execute, overdue)
            overdue_max = max(overdue_max, int(late[0][0]))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    try:
        began = time.perf_counter()
        setup_s = began - began_setup
        while time.perf_counter() - began < window + LEAD + 3 - setup_s:
            t = time.perf_counter()
            result = await store.jobs_release_due()
            calls.append((time.perf_counter() - t) * 1000)
            released += sum(result.released.values())
            await asyncio.sleep(max(0.5 - (time.perf_counter() - t), 0))
        total = time.perf_counter() - began
    finally:
        stop.set()
        await sampler
        await store.close()
    return {"due": due, "released": released, "window_s": window, "lead_s": LEAD,
            "setup_s": round(setup_s, 1), "calls": len(calls),
            "call_p50_ms": pct(calls, 0.5), "call_p99_ms": pct(calls, 0.99),
            "call_max_ms": round(max(calls), 2),
            "releaser_ms_per_s": round(sum(calls) / total, 2),
            "overdue_by_1s_max": overdue_max, "due_within_1s": overdue_max == 0}


async def enqueue(url: str, batches: int = 20, size: int = 1000) -> dict[str, Any]:
    app = kiln.App(url)
    try:
        await app.aenqueue_many([("k0", {"warm": True})])
        began = time.perf_counter()
        for b in range(batches):
            await app.aenqueue_many([("k0", {"n": b * size + i}) for i in range(size)])
        seconds = time.perf_counter() - began
    finally:
        await app.aclose()
    return {"jobs": batches * size, "jobs_per_s": round(batches * size / seconds, 1)}


# the leader's services, with their default intervals (seconds)
def maintenance_calls(store: Any) -> dict[str, tuple[Callable[[], Awaitable[Any]], float]]:
    return {
        # kilnotel's counts: the live states every counts_ttl (5 s) while scraped, every
        # state each FINISHED_TTL (300 s); capped as kilnotel asks (exact up to 100 a
        # queue and state, estimated above)
        "job_counts live states (metrics)": (lambda: store.job_counts(LIVE, cap=COUNT_CAP),
                                             5.0),
        "job_counts every state (metrics)": (lambda: store.job_counts(cap=COUNT_CAP), 300.0),
        "table_sizes": (store.table_sizes, 60.0),
        "jobs_prune completed": (
            lambda: store.jobs_prune(JobState.COMPLETED, 86400.0, 1000), 60.0),
        "jobs_prune failed": (lambda: store.jobs_prune(JobState.FAILED, 7 * 86400.0, 1000), 60.0),
        "servers_sweep": (lambda: store.servers_sweep(3600.0), 60.0),
        "jobs_rescue_candidates": (lambda: store.jobs_rescue_candidates(60.0, 100), 15.0),
        "jobs_ending_release": (lambda: store.jobs_ending_release(60.0), 15.0),
        "jobs_release_stranded": (lambda: store.jobs_release_stranded(1000), 60.0),
        "concurrency_sweep": (lambda: store.concurrency_sweep(60.0), 60.0),
        "queue_oldest_available": (store.queue_oldest_available, 15.0),
        "queue_scheduled_due": (store.queue_scheduled_due, 15.0),
        # the Kinds page's read (capped; job_counts_by_kind, exact, before 2026-12-07)
        "job_kind_counts": (lambda: store.job_kind_counts(KIND_COUNT_CAP), 60.0),
        # kilnotel's kiln_jobs_unhandled: Client.unhandled every counts_ttl, capped
        "jobs_available_by_kind": (lambda: store.jobs_available_by_kind(COUNT_CAP), 5.0),
    }


async def maintenance(url: str) -> dict[str, Any]:
    store = open_store(url, 2)
    await store.open()
    out: dict[str, Any] = {}
    per_minute = 0.0
    try:
        for name, (call, every) in maintenance_calls(store).items():
            times = []
            for _ in range(3):
                began = time.perf_counter()
                try:
                    await call()
                except Exception as exc:  # a bench reports, it does not stop
                    out[name] = {"error": repr(exc)[:200]}
                    break
                times.append((time.perf_counter() - began) * 1000)
            if times:
                median = statistics.median(times)
                out[name] = {"median_ms": round(median, 2), "every_s": every}
                per_minute += median * 60.0 / every
    finally:
        await store.close()
    out["ms_per_minute"] = round(per_minute, 1)
    return out


PAGES = {
    "overview": "/", "queues": "/queues", "kinds": "/kinds", "servers": "/servers",
    "jobs": "/jobs", "jobs available": "/jobs?state=available",
    "jobs scheduled": "/jobs?state=scheduled", "jobs queue q3": "/jobs?queue=q3",
    "jobs kind k42": "/jobs?kind=k42", "jobs tenant arg": "/jobs?state=available&arg=tenant=7",
    "api overview": "/api/overview", "api jobs": "/api/jobs",
}


async def dashboard(url: str) -> dict[str, Any]:
    app = create_app(url)
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as http:
        for name, path in PAGES.items():
            times = []
            status = 0
            for _ in range(4):
                began = time.perf_counter()
                response = await http.get(path)
                times.append((time.perf_counter() - began) * 1000)
                status = response.status_code
            warm = statistics.median(times[1:])
            out[name] = {"path": path, "status": status, "first_ms": round(times[0], 1),
                         "median_ms": round(warm, 1), "under_goal": warm < GOAL_PAGE_MS}
        await app.state.kiln.source.close()
    out["all_under_goal"] = all(v["under_goal"] for v in out.values() if isinstance(v, dict))
    return out


def list_all(url: str, limit_rows: int) -> dict[str, Any]:
    """``kiln jobs list --all`` over the available jobs of enough queues to reach about
    ``limit_rows`` rows (or all of them): its rows a second, peak RSS and progress."""
    cmd = [sys.executable, "-m", "kiln.cli", "jobs", "list", "--all", "--page-size", "1000",
           "--database-url", url]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ))
    assert proc.stdout is not None and proc.stderr is not None
    rows = 0
    for _ in proc.stdout:
        rows += 1
        if rows >= limit_rows:
            break
    seconds = time.perf_counter() - began
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    progress = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
    return {"rows": rows, "seconds": round(seconds, 1), "rows_per_s": round(rows / seconds),
            "peak_rss_mb": round(max(peak_kb, before) / 1024, 1),
            "progress_lines": len(progress), "last_progress": progress[-1][-200:] if progress
            else None}


def run(rows: int, claims_per_queue: int, window: float, parts: set[str], *,
        store: str = "postgresql", keep: bool = False, reuse: str | None = None
        ) -> dict[str, Any]:
    """``keep``: leave the big table's database (``out["kept"]`` is its URL) for
    ``reuse``, which measures it without building (parts that change the table, such
    as drain and release, then leave it changed)."""
    available, scheduled = rows // 2, rows - rows // 2
    big = Target(store, "kiln_backlog", url=reuse)
    out: dict[str, Any] = {"case": "backlog", "database": big.kind, "rows": rows,
                           "available": available, "scheduled": scheduled,
                           "queue_share": available // QUEUES, "drain_queue": DRAIN_QUEUE}
    try:
        asyncio.run(migrate(big.url))  # on reuse: this checkout's migrations, if new
        if reuse is None:
            out["build_s"] = round(fill(big, available, scheduled), 1)
            out["fill_rows_per_s"] = round(rows / out["build_s"])
            log(f"built {rows:,} rows in {out['build_s']} s")
        out["facts_before"] = big.facts()
        _on_big(out, big, rows, claims_per_queue, window, parts)
        out["facts_after"] = big.facts()
    finally:
        if keep or reuse is not None:
            out["kept"] = big.url
        else:
            big.drop()
    if parts & {"drain", "enqueue", "claim"}:
        fresh = Target(store, "kiln_backlog_fresh")
        try:
            asyncio.run(migrate(fresh.url))
            _on_fresh(out, fresh, available, claims_per_queue, parts)
        finally:
            fresh.drop()
    return out


def _on_big(out: dict[str, Any], big: Target, rows: int, claims_per_queue: int,
            window: float, parts: set[str]) -> None:
    url = big.url
    steps: list[tuple[str, str, Callable[[], Any]]] = [
        ("claim", "claim", lambda: asyncio.run(claims(url, claims_per_queue))),
        ("dashboard", "dashboard", lambda: asyncio.run(dashboard(url))),
        ("maintenance", "maintenance", lambda: asyncio.run(maintenance(url))),
        ("enqueue", "enqueue_big", lambda: asyncio.run(enqueue(url))),
        ("list_all", "list_all", lambda: list_all(url, min(rows, 1_000_000))),
        ("drain", "drain_big", lambda: asyncio.run(drain(big, DRAIN_QUEUE))),
        # last: it makes scheduled jobs available
        ("release", "release", lambda: asyncio.run(
            release(big, min(100_000, out["scheduled"]), window))),
    ]
    for part, key, step in steps:
        if part in parts:
            out[key] = step()
            out[key]["load_1m"] = round(os.getloadavg()[0], 1)
            log(f"{big.kind} {key}: {str(out[key])[:300]}")


def _on_fresh(out: dict[str, Any], fresh: Target, available: int, claims_per_queue: int,
              parts: set[str]) -> None:
    url = fresh.url
    if "enqueue" in parts:
        out["enqueue_fresh"] = asyncio.run(enqueue(url))
        out["enqueue_big_over_fresh"] = round(
            out["enqueue_big"]["jobs_per_s"] / out["enqueue_fresh"]["jobs_per_s"], 3)
    if not parts & {"drain", "claim"}:
        return
    fresh.delete_jobs()
    fill(fresh, available, 0, only_queue=DRAIN_QUEUE)  # that queue's jobs alone
    if "claim" in parts and DRAIN_QUEUE == 3:
        one = asyncio.run(claims(url, claims_per_queue, only=3))
        out["claim_fresh_q3"] = {k: one[k] for k in ("claim_p50_ms", "claim_p99_ms")}
        out["claim_q3_p99_big_over_fresh"] = round(
            out["claim"]["queues"]["q3"]["p99_ms"] / one["claim_p99_ms"], 2)
    if "drain" in parts:
        out["drain_fresh"] = asyncio.run(drain(fresh, DRAIN_QUEUE))
        out["drain_fresh"]["load_1m"] = round(os.getloadavg()[0], 1)
        if out["drain_fresh"]["jobs_per_s"]:  # a tiny table's claims may have taken them all
            out["drain_big_over_fresh"] = round(
                out["drain_big"]["jobs_per_s"] / out["drain_fresh"]["jobs_per_s"], 3)
        if out["drain_big"].get("backend_cpu_us_per_job"):  # PostgreSQL, jobs drained
            out["drain_cpu_fresh_over_big"] = round(  # the database's CPU a job
                out["drain_fresh"]["backend_cpu_us_per_job"]
                / out["drain_big"]["backend_cpu_us_per_job"], 3)
