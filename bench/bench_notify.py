"""Enqueue commits/s from many single-job producers, NOTIFY on / limited / off (issue 41).

Every PostgreSQL enqueue used to send NOTIFY in its transaction, and each notifying
commit takes PostgreSQL's global notify lock. This runs ``--producers`` concurrent
producers (spread over ``--procs`` processes, asyncio tasks in each, one connection
each), every one committing one job per transaction (``store.job_insert_many([job])``,
what one ``aenqueue`` does) into one queue for ``--seconds``, in three modes:

- ``on``: every insert notifies (``notify_window=0``);
- ``limited``: the store's default window (``notify_window=0.01``, or ``--window``):
  per queue at most one NOTIFY per window per process, the rest owed and sent at the
  window's end (kiln.stores.postgres._limiter);
- ``off``: a window longer than the run: the first insert notifies, none after.

Each mode and producer count runs on a fresh schema, ``--rounds`` times, interleaved
(``--modes`` picks the modes and their order within a round: a mode run right after
``on`` may inherit the server's state from it);
prints one JSON line per (producers, mode) with the median commits/s, then one
summary line with limited/off and on/off per producer count.

``--diagnose`` also prints, per run, where the commits' time went: how many inserts
carried a NOTIFY (the limiter let them notify), how many owed wake-ups the stores sent
as statements of their own, and what the producers' backends were waiting on
(``pg_stat_activity`` sampled every 10 ms: ``Lock/object`` is the notify lock,
``IO/WALSync`` and ``LWLock/WALWrite`` the commit's flush, ``Client/ClientRead`` the
producer's own time).

    python -m bench.bench_notify --producers 32 64 --seconds 5 --rounds 3
    python -m bench.bench_notify --producers 32 --rounds 2 --modes off limited --diagnose
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import threading
import time
import uuid
from collections import Counter
from typing import Any

import psycopg

from kiln._model._job import NewJob
from kiln.stores import store_from_url
from kiln.stores.postgres._limiter import NOTIFY_WINDOW

WINDOWS = {"on": 0.0, "limited": NOTIFY_WINDOW, "off": 1e9}


async def _produce(
    url: str, window: float, tasks: int, seconds: float, ready: Any
) -> tuple[int, int, int]:
    store = store_from_url(url, max_conns=tasks, min_conns=tasks, notify_window=window)
    await store.open()
    commits = 0
    loud, owed = _counted(store)
    # every process connected (and imported, which a loaded machine makes slow) first
    await asyncio.to_thread(ready.wait)
    until = time.time() + seconds

    async def one() -> None:
        nonlocal commits
        job = NewJob(kind="bench.notify", args={}, queue="bench")
        while time.time() < until:
            await store.job_insert_many([job])
            commits += 1

    try:
        await asyncio.gather(*(one() for _ in range(tasks)))
    finally:
        await store.close()
    return commits, loud[0], owed[0]


def _counted(store: Any) -> tuple[list[int], list[int]]:
    """Counts (for --diagnose) of the inserts that carried a NOTIFY and of the owed
    wake-ups sent on their own, read from the PostgreSQL store's limiter decisions."""
    loud, owed = [0], [0]
    quiet, notify = store._quiet, store._notify

    def counted_quiet(jobs: Any) -> bool:
        q: bool = quiet(jobs)
        loud[0] += not q
        return q

    async def counted_notify(queues: list[str]) -> None:
        owed[0] += 1
        await notify(queues)

    store._quiet, store._notify = counted_quiet, counted_notify
    return loud, owed


def _proc(url: str, window: float, tasks: int, seconds: float, ready: Any, out: Any) -> None:
    out.put(asyncio.run(_produce(url, window, tasks, seconds, ready)))


class _Waits:
    """Samples what the producers' backends wait on (pg_stat_activity, every 10 ms)."""

    def __init__(self, base: str) -> None:
        self.counts: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._conn = psycopg.connect(base, autocommit=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            rows = self._conn.execute(
                "SELECT coalesce(wait_event_type || '/' || wait_event, 'CPU'), count(*)"
                " FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND application_name = 'kiln' AND state = 'active' GROUP BY 1").fetchall()
            self.samples += 1
            for event, n in rows:
                self.counts[event] += n

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self._conn.close()
        return {k: round(v / max(self.samples, 1), 2) for k, v in self.counts.most_common(8)}


def run_one(
    base: str, window: float, producers: int, procs: int, seconds: float,
    diagnose: dict[str, Any] | None = None,
) -> float:
    schema = f"kiln_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    try:
        store = store_from_url(url)
        asyncio.run(_migrate(store))
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        split = [producers // procs + (1 if i < producers % procs else 0) for i in range(procs)]
        split = [n for n in split if n]
        ready = ctx.Barrier(len(split))
        ps = [ctx.Process(target=_proc, args=(url, window, n, seconds, ready, out))
              for n in split]
        for p in ps:
            p.start()
        waits = _Waits(base) if diagnose is not None else None
        got = [out.get(timeout=seconds + 300) for _ in ps]
        total: int = sum(g[0] for g in got)
        for p in ps:
            p.join()
        if waits is not None and diagnose is not None:
            diagnose.update(
                commits_per_s=round(total / seconds),
                notifying_inserts=sum(g[1] for g in got), owed_sent=sum(g[2] for g in got),
                commits=total, backends_waiting_on=waits.stop())
        return total / seconds
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


async def _migrate(store: Any) -> None:
    await store.open()
    try:
        await store.migrate()
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--producers", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window", type=float, default=NOTIFY_WINDOW,
                        help="the limited mode's notify_window (default: the store's)")
    parser.add_argument("--diagnose", action="store_true",
                        help="per run: NOTIFYs sent and what the backends waited on")
    parser.add_argument("--modes", nargs="+", default=list(WINDOWS), choices=list(WINDOWS),
                        help="the modes, in the order each round runs them")
    args = parser.parse_args()
    windows = {mode: args.window if mode == "limited" else WINDOWS[mode]
               for mode in args.modes}
    rates: dict[tuple[int, str], list[float]] = {}
    for _ in range(args.rounds):
        for producers in args.producers:
            for mode, window in windows.items():
                diag: dict[str, Any] | None = {} if args.diagnose else None
                rate = run_one(args.url, window, producers, args.procs, args.seconds, diag)
                if diag is not None:
                    print(json.dumps({"bench": "notify", "producers": producers,
                                      "mode": mode, **diag}), flush=True)
                rates.setdefault((producers, mode), []).append(rate)
    summary: dict[str, Any] = {"bench": "notify", "seconds": args.seconds,
                               "rounds": args.rounds, "procs": args.procs,
                               "window": args.window}
    for (producers, mode), values in rates.items():
        median = statistics.median(values)
        print(json.dumps({"bench": "notify", "producers": producers, "mode": mode,
                          "commits_per_s": round(median), "runs": [round(v) for v in values]}))
        summary[f"{producers}_{mode}"] = round(median)
    for producers in args.producers:
        if "off" not in windows:
            continue
        for mode in [m for m in ("limited", "on") if m in windows]:
            # the ratio within each round, then their median
            summary[f"{producers}_{mode}_over_off_per_round"] = round(statistics.median(
                a / b for a, b in zip(rates[(producers, mode)], rates[(producers, "off")],
                                      strict=True)), 3)
            off = statistics.median(rates[(producers, "off")])
            summary[f"{producers}_{mode}_over_off"] = round(
                statistics.median(rates[(producers, mode)]) / off, 3)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
