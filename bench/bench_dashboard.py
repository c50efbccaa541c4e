"""Dashboard pages over 1,000,000 jobs on PostgreSQL: each listing must answer in < 200 ms.

Fills a throwaway schema with ``--jobs`` rows (INSERT ... SELECT generate_series; this
is bench code, so it writes SQL directly), ANALYZEs it, then times every listing page
through the ASGI app (httpx ASGITransport: routing, the store calls and the Jinja
rendering, no network). Each page gets one warm-up, then ``--rounds`` timed requests;
``cold_ms`` is the first request after the cached counts were dropped (it pays for the
per-state GROUP BY). Prints one JSON object; the schema is dropped unless ``--keep``.

The charts (/charts and /api/timings, every range) read the timings rollup
(kiln._model._rollup): after the fill, the bench rolls it the way the leader's Roller
does (Store.timings_roll until caught up, timed as ``rollup``), and ``--reuse`` rolls
what is new first (``rollup_catchup``). ``timings`` times the store's read per range
and grouping, uncached, against the same read with the watermark unset (every job read
from kiln_jobs, as before the rollup), interleaved round by round.

    python bench/bench_dashboard.py [--url postgresql://postgres@127.0.0.1:5432/test]
        [--jobs 1000000] [--rounds 7] [--keep | --fill-only | --reuse SCHEMA]
        [--only REGEX]   # time only the pages whose name matches (no store calls)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import re
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import psycopg

from kiln._model._job import KIND_COUNT_CAP
from kiln.stores import store_from_url
from kiln.web import create_app

GOAL_MS = 200.0
CHUNK = 100_000
ERRORS = [
    "RuntimeError: SMTP timeout talking to mx.example.com",
    "ConnectionError: DNS failure for api.example.com",
    "ValueError: payload is missing customer_id",
    "TimeoutError: the job ran longer than 30s",
    "HTTPError: 503 Service Unavailable from payments",
    "KeyError: 'invoice'",
    "OSError: [Errno 28] No space left on device",
]
RARE = "RareError: needle-7f3a"  # in one job of every 100,003

# state by a deterministic pseudo-random fraction of the id
STATE_CASE = """CASE
  WHEN f < 0.700 THEN 'completed' WHEN f < 0.800 THEN 'failed'
  WHEN f < 0.900 THEN 'available' WHEN f < 0.950 THEN 'scheduled'
  WHEN f < 0.980 THEN 'cancelled' WHEN f < 0.990 THEN 'running'
  WHEN f < 0.995 THEN 'awaiting' ELSE 'pending' END"""

FILL = f"""
INSERT INTO kiln_jobs (queue, kind, state, args, metadata, priority, run_at, attempt,
    max_attempts, errors, created_at, attempted_at, finished_at, server_id, rate_key, tags)
SELECT 'q' || mod(g, 10), 'kind.' || mod(g, 30), state,
    jsonb_build_object('n', g, 'to', 'user' || g || '@example.com'),
    jsonb_build_object('otel', jsonb_build_object('traceparent',
        '00-' || md5(g::text) || '-' || substr(md5((g + 1)::text), 1, 16) || '-01'),
        'tenant', mod(g, 1000)),
    0, created + CASE WHEN state = 'scheduled' THEN interval '1 hour' ELSE interval '0' END,
    CASE WHEN state IN ('completed', 'failed', 'running') THEN 1 ELSE 0 END, 25,
    CASE WHEN state = 'failed' OR (state = 'scheduled' AND mod(g, 2) = 0) THEN jsonb_build_array(
        jsonb_build_object('attempt', 1, 'at', extract(epoch FROM created),
            'error', CASE WHEN mod(g, 100003) = 0 THEN %(rare)s
                          ELSE (%(errors)s::text[])[1 + mod(g, 7)] END,
            'traceback', 'Traceback (most recent call last):' || chr(10)
                || '  File "jobs.py", line ' || mod(g, 500) || ', in run' || chr(10),
            'server_id', 'bench-server'))
        ELSE '[]'::jsonb END,
    created,
    CASE WHEN state IN ('completed', 'failed', 'running') THEN created END,
    CASE WHEN state IN ('completed', 'failed', 'cancelled')
         THEN created + interval '1 second' END,
    CASE WHEN state IN ('completed', 'failed', 'running') THEN 'bench-server' END,
    CASE WHEN state = 'pending' THEN 'rk' || mod(g, 3) END,
    CASE WHEN mod(g, 5) = 0 THEN '{{}}'::text[] ELSE
        ARRAY[CASE WHEN mod(g, 2) = 0 THEN 'region:eu' ELSE 'region:us' END]
        || CASE WHEN mod(g, 100) = 1 THEN ARRAY['vip'] ELSE '{{}}' END
        || CASE WHEN mod(g, 100003) = 7 THEN ARRAY['audit'] ELSE '{{}}' END END
FROM (
    SELECT g, {STATE_CASE} AS state,
           now() - (%(total)s - g) * interval '10 milliseconds' AS created
    FROM (SELECT g, mod(g::bigint * 2654435761, 1000003) / 1000003.0 AS f
          FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g) AS s
) AS jobs
"""


# --shape backlog: a quarter of the jobs available (the lowest ids), the rest scheduled
# for tomorrow above them, as a backlog under newer scheduled jobs (bench_scale's case)
BACKLOG_FILL = """
INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)
SELECT 'q' || mod(g, 20), 'kind.' || mod(g, 100),
    CASE WHEN g <= %(total)s / 4 THEN 'available' ELSE 'scheduled' END,
    jsonb_build_object('n', g),
    CASE WHEN g <= %(total)s / 4 THEN now() ELSE now() + interval '1 day' END, 25
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g
"""


def schema_url(url: str, schema: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"-csearch_path={schema}"
    return urlunsplit(parts._replace(query=urlencode(query)))


async def migrate(url: str) -> None:
    store = store_from_url(url)
    await store.open()
    try:
        await store.migrate()
    finally:
        await store.close()


def fill(url: str, total: int, shape: str = "mixed") -> float:
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for lo in range(1, total + 1, CHUNK):
            hi = min(lo + CHUNK - 1, total)
            conn.execute(FILL if shape == "mixed" else BACKLOG_FILL,
                         {"lo": lo, "hi": hi, "total": total, "rare": RARE,
                          "errors": ERRORS})
            print(f"  filled {hi:,} jobs", file=sys.stderr, flush=True)
        conn.execute(
            "INSERT INTO kiln_servers (id, host, pid, queues, kinds, version, started_at,"
            " heartbeat_at) VALUES ('bench-server', 'bench', 1, '{\"q0\": 10}',"
            " '[\"kind.0\"]', 'bench', now(), now())"
        )
        conn.execute("ANALYZE")
        # what autovacuum's autosummarize does for the BRIN index on created_at
        # (migration 0009) shortly after a bulk insert
        conn.execute("SELECT brin_summarize_new_values('kiln_jobs_created')")
    return time.perf_counter() - started


def facts(url: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), max(id), count(*) FILTER (WHERE state = 'failed') FROM kiln_jobs"
        ).fetchone()
    assert row is not None
    return {"jobs": row[0], "max_id": row[1], "failed": row[2]}


def pages(f: dict[str, Any]) -> dict[str, str]:
    deep = f["max_id"] // 50  # 98% of the way down
    mid = f["max_id"] // 2
    return {
        "all: first page": "/jobs",
        "all: deep keyset page": f"/jobs?before={deep}",
        "failed tab": "/jobs?state=failed",
        "failed tab: deep page": f"/jobs?state=failed&before={deep}",
        "available tab": "/jobs?state=available",
        "completed tab: middle page": f"/jobs?state=completed&before={mid}",
        "filter queue": "/jobs?queue=q3",
        "filter kind": "/jobs?kind=kind.7",
        "failed + queue + kind": "/jobs?state=failed&queue=q3&kind=kind.13",
        "failed + common error": "/jobs?state=failed&error=smtp",
        "failed + rare error": "/jobs?state=failed&error=needle-7f3a",
        "all + 100 per page": "/jobs?limit=100",
        "enqueued in the last hour": "/jobs?since=1h",
        "oldest first / its middle page": f"/jobs?order=oldest&after={mid}",
        "time range that holds nothing": "/jobs?until=2000-01-01T00:00",
        # tags (80% of jobs have some) and metadata (every job: its traceparent and a
        # tenant of 1,000) through the GIN indexes of migration 0007
        "filter tag: common (40%)": "/jobs?tag=region:eu",
        "filter tag: rare (~10 jobs)": "/jobs?tag=audit",
        "failed + tag vip (1%)": "/jobs?state=failed&tag=vip",
        "filter metadata tenant=42 (0.1%)": "/jobs?meta=tenant=42",
        "failed + metadata tenant=42": "/jobs?state=failed&meta=tenant=42",
        "tag + metadata: no match": "/jobs?tag=vip&meta=tenant=42",
        "failed + args n=4242 (no index)": "/jobs?state=failed&arg=n=4242",
    }


RANGES = ("1h", "6h", "24h", "7d")
OTHER_PAGES = {  # not listings: timed, but outside the listing goal
    **{f"charts {r} by queue": f"/charts?range={r}" for r in RANGES},
    **{f"charts {r} by kind": f"/charts?range={r}&by=kind" for r in RANGES},
    **{f"api: timings {r}": f"/api/timings?range={r}" for r in RANGES},
    **{f"api: timings {r} by kind": f"/api/timings?range={r}&by=kind" for r in RANGES},
    "job page": "/jobs/{mid}",
    "overview": "/",
    "queues": "/queues",
    "requeue-all confirm (exact count)": "/jobs/requeue-all?state=failed&error=smtp",
    "kinds (jobs by kind, cached)": "/kinds",
    "servers (running now)": "/servers",
    "api: jobs": "/api/jobs",
    "api: overview": "/api/overview",
    "requeue-all confirm: tenant 42": "/jobs/requeue-all?state=failed&meta=tenant=42",
    "requeue-all confirm: tag region:eu": "/jobs/requeue-all?state=failed&tag=region:eu",
}


async def _timed(http: httpx.AsyncClient, path: str, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = await http.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text)
    return times


async def time_pages(url: str, rounds: int, f: dict[str, Any],
                     only: str | None = None) -> dict[str, Any]:
    """Per page: warm (counts cached), cold (right after an invalidation: start-up or an
    action) and refreshing (count_ttl=0: every request starts a background refresh of
    the counts, which then competes for the database)."""
    app, refreshing = create_app(url), create_app(url, count_ttl=0)
    source = app.state.kiln.source
    results: dict[str, Any] = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as http, \
            httpx.AsyncClient(transport=httpx.ASGITransport(app=refreshing),
                              base_url="http://127.0.0.1") as busy:
        await busy.get("/")
        listings = pages(f)
        others = {k: v.format(mid=f["max_id"] // 2) for k, v in OTHER_PAGES.items()}
        for name, path in {**listings, **others}.items():
            if only and not re.search(only, name):
                continue
            source.invalidate()
            source._timings.clear()  # the charts' cached reads too: cold reads the store
            [cold] = await _timed(http, path, 1)
            median = statistics.median(times := await _timed(http, path, rounds))
            refresh = statistics.median(await _timed(busy, path, rounds))
            await _settle(refreshing)  # no background refresh overlaps the next page
            results[name] = {
                "path": path, "median_ms": round(median, 1), "max_ms": round(max(times), 1),
                "cold_ms": round(cold, 1), "refreshing_median_ms": round(refresh, 1),
                "listing": name in listings, "under_goal": median < GOAL_MS,
            }
            print(f"  {name:36s} {median:7.1f} ms  cold {cold:7.1f}  refreshing "
                  f"{refresh:7.1f}", file=sys.stderr)
        if only:
            await source.close()
            await refreshing.state.kiln.source.close()
            return results
        results["action: requeue one failed job (POST)"] = await _time_action(http, rounds)
        store = (await source.client())._store
        results["store: job_counts (GROUP BY)"] = await _time_call(store.job_counts, rounds)
        results["store: job_throughput(3600)"] = await _time_call(
            lambda: store.job_throughput(3600.0), rounds)
        results["store: queue_oldest_available"] = await _time_call(
            store.queue_oldest_available, rounds)
        results["store: job_counts_by_kind (GROUP BY)"] = await _time_call(
            store.job_counts_by_kind, rounds)
        results["store: job_finished_series(3600, 60)"] = await _time_call(
            lambda: store.job_finished_series(3600.0, 60.0), rounds)
        results["store: queue_completed_series(3600, 60)"] = await _time_call(
            lambda: store.queue_completed_series(3600.0, 60.0), rounds)
        results["store: queue_running_counts"] = await _time_call(
            store.queue_running_counts, rounds)
        results["store: job_kind_counts (capped)"] = await _time_call(
            lambda: store.job_kind_counts(KIND_COUNT_CAP), rounds)
        results["side by side: new read / old statement"] = await _side_by_side(
            url, store, rounds)
        await source.close()
        await refreshing.state.kiln.source.close()
    return results


SPANS = {"1h": (3600.0, 60.0), "6h": (21600.0, 300.0), "24h": (86400.0, 900.0),
         "7d": (604800.0, 7200.0)}


async def roll(url: str) -> dict[str, Any]:
    """Roll the timings rollup until caught up, as the leader's Roller does."""
    store = store_from_url(url)
    await store.open()
    try:
        started, steps, jobs = time.perf_counter(), 0, 0
        while True:
            n, done = await store.timings_roll()
            steps, jobs = steps + 1, jobs + n
            if done:
                break
        return {"seconds": round(time.perf_counter() - started, 2), "windows": steps,
                "jobs": jobs}
    finally:
        await store.close()


async def time_timings(url: str, rounds: int) -> dict[str, Any]:
    """Store.job_timings per range and grouping, uncached: from the rollup, and with
    the watermark unset (the jobs read directly, as before it), interleaved."""
    store = store_from_url(url)
    await store.open()
    out: dict[str, Any] = {}
    try:
        mark = await store.timings_rolled_to()
        with psycopg.connect(url, autocommit=True) as conn:
            for name, (since, bucket) in SPANS.items():
                for by in ("queue", "kind"):
                    rolled: list[float] = []
                    direct: list[float] = []
                    for _ in range(rounds):
                        for unset, times in ((False, rolled), (True, direct)):
                            conn.execute("UPDATE kiln_timings_mark SET rolled_to = %s",
                                         (None if unset else mark,))
                            started = time.perf_counter()
                            await store.job_timings(since, bucket, by)
                            times.append((time.perf_counter() - started) * 1000)
                    conn.execute("UPDATE kiln_timings_mark SET rolled_to = %s", (mark,))
                    out[f"{name} by {by}"] = {
                        "rollup_median_ms": round(statistics.median(rolled), 1),
                        "rollup_max_ms": round(max(rolled), 1),
                        "direct_median_ms": round(statistics.median(direct), 1),
                    }
                    print(f"  timings {name} by {by}: rollup {statistics.median(rolled):7.1f}"
                          f" ms, direct {statistics.median(direct):7.1f} ms", file=sys.stderr)
            rows = conn.execute("SELECT width, count(*) FROM kiln_timings GROUP BY width"
                                ).fetchall()
        out["rollup_rows"] = {str(w): n for w, n in rows}
    finally:
        await store.close()
    return out


async def _time_action(http: httpx.AsyncClient, rounds: int) -> dict[str, Any]:
    """One job requeued from its page: the Client call, the audit entry and the counts
    refreshed before the redirect (so the next page is warm)."""
    times = []
    for _ in range(rounds):
        listing = await http.get("/jobs?state=failed&limit=1")
        job_id = re.search(r'name="ids" value="(\d+)"', listing.text)
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', listing.text)
        assert job_id and csrf, "no failed job left to requeue"
        started = time.perf_counter()
        response = await http.post(f"/jobs/{job_id.group(1)}/requeue",
                                   data={"csrf": csrf.group(1)})
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 303, response.text
    return {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}


async def _settle(app: Any) -> None:
    source = app.state.kiln.source
    for cached in (source.counts, source.throughput, source.oldest, source.running,
                   source.queue_series):
        task = cached._refresh
        if task is not None:
            await asyncio.wait([task], timeout=10)


# the statements the dashboard's refresh made before the rollup and the capped kind
# counts served them (PostgreSQL), timed round by round against the store's reads
OLD_SQL = {
    "job_throughput(3600)": (
        "SELECT state, count(*) FROM kiln_jobs WHERE state IN ('completed', 'failed',"
        " 'cancelled') AND finished_at >= now() - interval '3600 s' GROUP BY state"),
    "job_finished_series(3600, 60)": (
        "SELECT floor(extract(epoch FROM now() - finished_at) / 60)::int AS b, state,"
        " count(*) FROM kiln_jobs WHERE state IN ('completed', 'failed', 'cancelled')"
        " AND finished_at >= now() - interval '3600 s' GROUP BY b, state"),
    "queue_completed_series(3600, 60)": (
        "SELECT queue, floor(extract(epoch FROM now() - finished_at) / 60)::int AS b,"
        " count(*) FROM kiln_jobs WHERE state = 'completed'"
        " AND finished_at >= now() - interval '3600 s' GROUP BY queue, b"),
    "job_kind_counts": "SELECT kind, state, count(*) FROM kiln_jobs GROUP BY kind, state",
}


async def _side_by_side(url: str, store: Any, rounds: int) -> dict[str, Any]:
    new: dict[str, Callable[[], Awaitable[object]]] = {
        "job_throughput(3600)": lambda: store.job_throughput(3600.0),
        "job_finished_series(3600, 60)": lambda: store.job_finished_series(3600.0, 60.0),
        "queue_completed_series(3600, 60)": lambda: store.queue_completed_series(3600.0, 60.0),
        "job_kind_counts": lambda: store.job_kind_counts(KIND_COUNT_CAP),
    }
    out: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for name, call in new.items():
            times: dict[str, list[float]] = {"new": [], "old": []}
            for _ in range(rounds):
                started = time.perf_counter()
                await call()
                times["new"].append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                conn.execute(OLD_SQL[name]).fetchall()
                times["old"].append((time.perf_counter() - started) * 1000)
            n, o = statistics.median(times["new"]), statistics.median(times["old"])
            out[name] = {"new_median_ms": round(n, 1), "old_median_ms": round(o, 1),
                         "old_over_new": round(o / n, 1)}
            print(f"  side by side {name:34s} new {n:7.1f} ms  old {o:7.1f} ms",
                  file=sys.stderr)
    return out


async def _time_call(call: Any, rounds: int) -> dict[str, float]:
    await call()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    parser.add_argument("--reuse", metavar="SCHEMA", help="time an already filled schema")
    parser.add_argument("--only", metavar="REGEX", help="time only the pages it matches")
    parser.add_argument("--shape", choices=("mixed", "backlog"), default="mixed",
                        help="backlog: a quarter available under scheduled jobs (time"
                             " its listings with --only)")
    parser.add_argument("--fill-only", action="store_true",
                        help="fill a schema, keep it and print its name (time it with --reuse)")
    args = parser.parse_args()
    schema = args.reuse or f"kiln_bench_dash_{uuid.uuid4().hex[:8]}"
    url = schema_url(args.url, schema)
    fill_s = None
    try:
        if not args.reuse:
            with psycopg.connect(args.url, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
            asyncio.run(migrate(url))
            print(f"filling {schema} with {args.jobs:,} jobs", file=sys.stderr)
            fill_s = fill(url, args.jobs, args.shape)
            rolled = asyncio.run(roll(url))
            print(f"rolled the timings: {rolled}", file=sys.stderr)
        else:
            rolled = {"catchup": asyncio.run(roll(url))}
        if args.fill_only:
            print(json.dumps({"bench": "dashboard", "schema": schema, "fill_seconds": fill_s,
                              "rollup": rolled}))
            return
        f = facts(url)
        results = asyncio.run(time_pages(url, args.rounds, f, args.only))
        timings = (asyncio.run(time_timings(url, args.rounds))
                   if not args.only or re.search(args.only, "timings") else None)
        listing = [v for v in results.values() if v.get("listing")]
        print(json.dumps({
            "bench": "dashboard", "schema": schema, "fill_seconds": fill_s, **f,
            "goal_ms": GOAL_MS, "rounds": args.rounds,
            "listings_under_goal": all(v["under_goal"] for v in listing),
            "listings_over_goal": [v["path"] for v in listing if not v["under_goal"]],
            "pages": results, "rollup": rolled, "timings": timings,
            "loadavg": pathlib.Path("/proc/loadavg").read_text().split()[:3],
            "all_under_goal": all(v["median_ms"] < GOAL_MS for v in results.values()),
        }, indent=2))
    finally:
        if not args.keep and not args.reuse and not args.fill_only:
            with psycopg.connect(args.url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


if __name__ == "__main__":
    main()
