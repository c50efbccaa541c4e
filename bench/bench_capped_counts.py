"""The capped counts against the exact ones on one PostgreSQL table, interleaved.

Each round times, through the store, every read the dashboard and kilnotel make of the
jobs in aggregate, the old way and the new (kiln.stores.postgres._counts): the counts
of every state and of the live ones (exact, against ``cap=100``), the available jobs
by queue and kind (kilnotel's kiln_jobs_unhandled, exact against capped) and each
queue's oldest available job (the old ``min()`` over every available job, against the
loose index scan). Prints one JSON object: medians in ms, the load average at the start
and the end, and how far the estimates were from the exact counts.

    python -m bench.bench_scale --cases backlog --rows 3000000 --backlog-parts none \\
        --backlog-keep        # builds the table, measures nothing, prints its URL as "kept"
    python -m bench.bench_capped_counts --url postgresql://.../kiln_backlog_xxxx --rounds 5
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

from kiln._model._job import JobState
from kiln.stores import store_from_url
from kiln.stores.postgres._admin import AVAILABLE_PARTS
from kiln.stores.postgres._counts import OLDEST

CAP = 100  # what the dashboard and kilnotel ask for (kiln._model._job.COUNT_CAP)
LIVE = (JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
        JobState.RUNNING, JobState.FAILED)
OLD_OLDEST = ("SELECT queue, greatest(extract(epoch FROM now() - min(n)), 0)::float8"
              f" FROM ({AVAILABLE_PARTS.format(agg='min(run_at)')}) AS a GROUP BY queue")


async def run(url: str, rounds: int, cap: int = CAP) -> dict[str, Any]:
    store = store_from_url(url, max_conns=1)
    await store.open()
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)

    async def sql(text: str) -> Any:
        return await (await conn.execute(text.encode())).fetchall()

    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        "every state, exact": lambda: store.job_counts(),
        "every state, capped": lambda: store.job_counts(cap=cap),
        "live states, exact": lambda: store.job_counts(LIVE),
        "live states, capped": lambda: store.job_counts(LIVE, cap=cap),
        "available by kind, exact": lambda: store.jobs_available_by_kind(),
        "available by kind, capped": lambda: store.jobs_available_by_kind(cap),
        "oldest available, min() (before)": lambda: sql(OLD_OLDEST),
        "oldest available, loose scan": lambda: sql(OLDEST),
    }
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
    finally:
        await conn.close()
        await store.close()
    errors = [abs(c.count - exact[(c.queue, c.state)]) / exact[(c.queue, c.state)]
              for c in capped if c.estimated]
    return {
        "bench": "capped_counts", "cap": cap, "rounds": rounds, "load_start": round(load_start, 1),
        "load_end": round(os.getloadavg()[0], 1), "jobs": sum(exact.values()),
        "median_ms": {k: round(statistics.median(v), 1) for k, v in times.items()},
        "pairs": len(capped), "estimated": len(errors),
        "estimate_error_max": round(max(errors, default=0.0), 4),
        "estimate_error_median": round(statistics.median(errors), 4) if errors else 0.0,
        "exact_below_cap": all(c.count == exact[(c.queue, c.state)]
                               for c in capped if not c.estimated),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a PostgreSQL database with kiln's tables")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cap", type=int, default=CAP)
    a = parser.parse_args()
    print(json.dumps(asyncio.run(run(a.url, a.rounds, a.cap))), flush=True)


if __name__ == "__main__":
    main()
