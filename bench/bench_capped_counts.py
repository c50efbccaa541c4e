"""The capped counts against the exact ones on one table, interleaved (any store).

Each round times, through the store, every read the dashboard and kilnotel make of the
jobs in aggregate, the old way and the new (kiln.stores.postgres._counts): the counts
of every state and of the live ones (exact, against ``cap=100``), the available jobs
by queue and kind (kilnotel's kiln_jobs_unhandled, exact against capped), the jobs by
kind and state (the Kinds page: ``job_counts_by_kind`` against ``job_kind_counts``) and,
on PostgreSQL, each queue's oldest available job (the old ``min()`` over every available
job, against the loose index scan). Prints one JSON object: medians in ms, the load
average at the start and the end, and how far the estimates were from the exact counts.
On MariaDB and SQLite the estimates come from kiln.stores._sample (``--stores`` builds
the backlog in that store).

    python -m bench.bench_scale --cases backlog --rows 3000000 --backlog-parts none \\
        --backlog-keep        # builds the table, measures nothing, prints its URL as "kept"
    python -m bench.bench_capped_counts --url postgresql://.../kiln_backlog_xxxx --rounds 5
    python -m bench.bench_scale --cases backlog --rows 10000000 --stores sqlite \
        --backlog-parts none --backlog-keep   # then --url sqlite:///...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from kiln._model._job import KIND_COUNT_CAP, JobState
from kiln.stores import store_from_url
from kiln.stores.postgres._admin import AVAILABLE_PARTS
from kiln.stores.postgres._counts import OLDEST

CAP = 100  # what the dashboard and kilnotel ask for (kiln._model._job.COUNT_CAP)
LIVE = (JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
        JobState.RUNNING, JobState.FAILED)
OLD_OLDEST = ("SELECT queue, greatest(extract(epoch FROM now() - min(n)), 0)::float8"
              f" FROM ({AVAILABLE_PARTS.format(agg='min(run_at)')}) AS a GROUP BY queue")


def _errors(exact: dict[Any, int], capped: list[tuple[Any, int, bool]]) -> dict[str, Any]:
    """How far the estimated figures were from the exact ones, and whether the others
    were exact."""
    errors = [abs(n - exact.get(k, 0)) / max(exact.get(k, 0), 1) for k, n, est in capped if est]
    return {
        "pairs": len(capped), "estimated": len(errors),
        "estimate_error_max": round(max(errors, default=0.0), 4),
        "estimate_error_median": round(statistics.median(errors), 4) if errors else 0.0,
        "exact_below_cap": all(n == exact.get(k) for k, n, est in capped if not est),
        "pairs_missing": len(set(exact) - {k for k, _, _ in capped}),
    }


async def run(url: str, rounds: int, cap: int = CAP) -> dict[str, Any]:
    postgres = url.startswith("postgres")
    store = store_from_url(url, **({} if url.startswith("sqlite") else {"max_conns": 2}))
    await store.open()
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True) if postgres else None

    async def sql(text: str) -> Any:
        assert conn is not None
        return await (await conn.execute(text.encode())).fetchall()

    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        "every state, exact": lambda: store.job_counts(),
        "every state, capped": lambda: store.job_counts(cap=cap),
        "live states, exact": lambda: store.job_counts(LIVE),
        "live states, capped": lambda: store.job_counts(LIVE, cap=cap),
        "available by kind, exact": lambda: store.jobs_available_by_kind(),
        "available by kind, capped": lambda: store.jobs_available_by_kind(cap),
        "by kind and state, exact": lambda: store.job_counts_by_kind(),
        "by kind and state, capped": lambda: store.job_kind_counts(KIND_COUNT_CAP),
    }
    if postgres:
        reads["oldest available, min() (before)"] = lambda: sql(OLD_OLDEST)
        reads["oldest available, loose scan"] = lambda: sql(OLDEST)
    times: dict[str, list[float]] = {name: [] for name in reads}
    load_start = os.getloadavg()[0]
    try:
        for _ in range(rounds):
            for name, read in reads.items():
                began = time.perf_counter()
                await read()
                times[name].append((time.perf_counter() - began) * 1000)
        exact = {(c.queue, c.state): c.count for c in await store.job_counts()}
        capped = await store.job_counts(cap=cap)
        by_kind = {(q, k): n for q, k, n in await store.jobs_available_by_kind()}
        by_kind_capped = await store.jobs_available_by_kind(cap)
        kinds = {(k, s): n for k, s, n in await store.job_counts_by_kind()}
        kinds_capped = await store.job_kind_counts(KIND_COUNT_CAP)
    finally:
        if conn is not None:
            await conn.close()
        await store.close()
    return {
        "bench": "capped_counts", "store": url.split(":")[0], "cap": cap, "rounds": rounds,
        "load_start": round(load_start, 1), "load_end": round(os.getloadavg()[0], 1),
        "jobs": sum(exact.values()),
        "median_ms": {k: round(statistics.median(v), 1) for k, v in times.items()},
        **_errors(exact, [((c.queue, c.state), c.count, c.estimated) for c in capped]),
        # available by kind carries no mark: a pair is estimated when it passed the cap
        "available_by_kind": _errors(by_kind, [((q, k), n, by_kind.get((q, k), 0) > cap)
                                               for q, k, n in by_kind_capped]),
        "kind_counts": _errors(kinds, [((c.kind, c.state), c.count, c.estimated)
                                       for c in kinds_capped]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a database with kiln's tables (any store)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cap", type=int, default=CAP)
    a = parser.parse_args()
    print(json.dumps(asyncio.run(run(a.url, a.rounds, a.cap))), flush=True)


if __name__ == "__main__":
    main()
