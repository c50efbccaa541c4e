"""The leader's periodic reads that issue #45 found growing with the backlog, timed
alone through the store: the rescuer's candidates, the stranded awaiting jobs, the
table's size, each queue's oldest available job and its due scheduled jobs.

Builds a backlog (bench/backlog_stores.py: half available over 20 queues, half
scheduled over the next day) and keeps it with ``--keep``, or times one kept with
``--reuse URL``. To compare two checkouts on one table, run this file by its path with
``PYTHONPATH`` set to each checkout in turn::

    PYTHONPATH=$PWD python -m bench.bench_reads45 --store sqlite --rows 10000000 --keep
    PYTHONPATH=/path/to/other python bench/bench_reads45.py --reuse sqlite:///...

One JSON line: each read's median over ``--runs`` calls, in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench import scale_backlog
from bench.backlog_stores import Target


def reads(store: Any) -> dict[str, Callable[[], Awaitable[Any]]]:
    """The reads, called as the leader's services call them (scale_backlog's table)."""
    return {
        "jobs_rescue_candidates": lambda: store.jobs_rescue_candidates(60.0, 100),
        "jobs_release_stranded": lambda: store.jobs_release_stranded(1000),
        "table_sizes": store.table_sizes,
        "queue_oldest_available": store.queue_oldest_available,
        "queue_scheduled_due": store.queue_scheduled_due,
    }


async def measure(url: str, runs: int) -> dict[str, float]:
    store = scale_backlog.open_store(url, 2)
    await store.open()
    out: dict[str, float] = {}
    try:
        for name, call in reads(store).items():
            times = []
            for _ in range(runs):
                began = time.perf_counter()
                await call()
                times.append((time.perf_counter() - began) * 1000)
            out[name] = round(statistics.median(times), 2)
    finally:
        await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="sqlite", choices=("sqlite", "mariadb"))
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="keep the table (URL printed)")
    parser.add_argument("--reuse", metavar="URL", help="time a kept table (no build)")
    a = parser.parse_args()
    db = Target(a.store, "kiln_reads45", url=a.reuse)
    out: dict[str, Any] = {"store": db.kind, "rows": a.rows if a.reuse is None else None}
    try:
        if a.reuse is None:
            asyncio.run(scale_backlog.migrate(db.url))
            out["build_s"] = round(scale_backlog.fill(db, a.rows // 2, a.rows - a.rows // 2), 1)
        out["median_ms"] = asyncio.run(measure(db.url, a.runs))
    finally:
        if a.keep or a.reuse is not None:
            out["kept"] = db.url
        else:
            db.drop()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
