"""Times the operator views' store reads (issue 44) on a filled schema: the charts
page's timings per range and grouping, beside the overview's finished-per-minute read
over the same range (interleaved, for a ratio on a loaded machine), and the Failed
tab's error groups, one group's first page and exact count.

Fill a schema first with ``python bench/bench_dashboard.py --fill-only`` (it prints its
name), then::

    python bench/bench_views.py --schema kiln_bench_dash_XXXXXXXX
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kiln._model._job import JobFilter, JobState
from kiln.stores import Store, store_from_url
from kiln.web._timings import RANGES

GROUP = "KeyError: 'invoice'"  # one of bench_dashboard's error messages


async def timed(call: Callable[[], Awaitable[Any]], rounds: int) -> float:
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        out.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(out), 1)


async def side_by_side(store: Store, span: float, bucket: float, rounds: int) -> dict[str, Any]:
    series: list[float] = []
    timings: list[float] = []
    for _ in range(rounds):
        series.append(await timed(lambda: store.job_finished_series(span, bucket), 1))
        timings.append(await timed(lambda: store.job_timings(span, bucket, "queue"), 1))
    return {"finished_series_ms": statistics.median(series),
            "timings_ms": statistics.median(timings),
            "ratio": round(statistics.median(timings) / statistics.median(series), 2)}


async def run(url: str, rounds: int) -> dict[str, Any]:
    store = store_from_url(url)
    await store.open()
    out: dict[str, Any] = {}
    try:
        for name, rng in RANGES.items():
            for by in ("queue", "kind"):
                read = functools.partial(store.job_timings, rng.span, rng.bucket, by)
                out[f"timings {name} by {by}"] = await timed(read, rounds)
        for name in ("1h", "6h"):
            rng = RANGES[name]
            out[f"timings vs finished series {name}"] = await side_by_side(
                store, rng.span, rng.bucket, rounds)
        failed = JobFilter(states=(JobState.FAILED,))
        out["error groups, Failed tab"] = await timed(
            lambda: store.job_error_groups(failed, 20), rounds)
        in_q3 = JobFilter(states=(JobState.FAILED,), queue="q3")
        out["error groups, Failed + queue"] = await timed(
            lambda: store.job_error_groups(in_q3, 20), rounds)
        group = JobFilter(states=(JobState.FAILED,), last_error=GROUP)
        out["one group, first page"] = await timed(lambda: store.job_list(group, 51), rounds)
        out["one group, exact count"] = await timed(lambda: store.job_count(group), rounds)
    finally:
        await store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--schema", required=True, help="a schema bench_dashboard filled")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sep = "&" if "?" in args.url else "?"
    url = f"{args.url}{sep}options=-csearch_path%3D{args.schema}"
    print(json.dumps({"bench": "views", **asyncio.run(run(url, args.rounds))}, indent=1))


if __name__ == "__main__":
    main()
