"""The chaos suite, long form: the CI form's code (tests/chaos/harness.py) with more
faults, jobs and time, run after run until ``--duration`` is used up.

Each run gets a fresh database (a schema on PostgreSQL, a database on MariaDB, a file
on SQLite) and prints one JSON line: seed, faults injected by type, jobs, executions,
duplicates and their causes, lost, stuck, time to settle and every violation. The
last line, ``"summary": true``, adds the runs up. Exit status 1 if any run had a
violation.

    python -m bench.chaos --backend postgres --duration 1800 --seed 1
    python -m bench.chaos --backend mysql --real-restart --duration 1800

``--real-restart`` restarts a private server of the backend (tests/chaos/dbserver.py,
started for the run on a port of its own, so nothing else on the machine notices)
instead of cutting every worker's connections through the proxies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from tests.chaos.harness import Spec, faults_for, run
from tests.plugins import databases


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["sqlite", "postgres", "mysql"], default="postgres")
    p.add_argument("--seed", type=int, default=int(time.time()),
                   help="seed of the first run; run i uses seed + i (default: the time)")
    p.add_argument("--duration", type=float, default=600.0,
                   help="total seconds to keep starting runs (default 600)")
    p.add_argument("--run-seconds", type=float, default=60.0,
                   help="seconds of faults per run (default 60)")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--jobs", type=int, default=600, help="jobs per run (default 600)")
    p.add_argument("--concurrency", type=int, default=4, help="slots per worker")
    p.add_argument("--settle-timeout", type=float, default=90.0)
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="keep each run's ledger and worker output in DIR/seed-N")
    p.add_argument("--real-restart", action="store_true",
                   help="restart a private database server instead of proxy outages")
    return p


@contextlib.contextmanager
def _database(backend: str, tmp: Path, base: str | None) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp / 'kiln.db'}"
        return
    gen = (databases.postgres_schema_url(base) if backend == "postgres"
           else databases.mysql_database_url(base))
    url = next(gen)
    try:
        yield url
    finally:
        with contextlib.suppress(StopIteration):
            next(gen)


@contextlib.asynccontextmanager
async def _server(args: argparse.Namespace) -> AsyncIterator[Any]:
    if not args.real_restart:
        yield None
        return
    from tests.chaos.dbserver import private_server

    async with private_server(args.backend) as server:
        yield server


async def _one(args: argparse.Namespace, seed: int, server: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kiln-chaos-") as d:
        tmp = Path(d)
        if args.keep is not None:
            tmp = args.keep / f"seed-{seed}"
            tmp.mkdir(parents=True, exist_ok=True)
        with _database(args.backend, tmp, server.url if server else None) as url:
            spec = Spec(url=url, seed=seed, tmp=tmp, duration=args.run_seconds,
                        workers=args.workers, jobs=args.jobs, concurrency=args.concurrency,
                        faults=faults_for(args.backend, args.real_restart),
                        settle_timeout=args.settle_timeout, db=server)
            return await run(spec)


def _summary(results: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for r in results:
        faults.update(r["faults"])
        causes.update(r["duplicate_causes"])
    keys = ("jobs", "executions", "duplicates", "ended_twice", "lost", "stuck",
            "double_completed", "unaccounted", "overlaps", "self_fences", "woken_completions")
    settles = [r["settle_seconds"] for r in results if r["settle_seconds"] is not None]
    return {"summary": True, "runs": len(results), "seconds": round(seconds),
            "faults": dict(faults), "duplicate_causes": dict(causes),
            **{k: sum(r[k] for r in results) for k in keys},
            "settle_seconds_max": max(settles, default=None),
            "runs_with_violations": sum(1 for r in results if r["violations"])}


async def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    began = time.monotonic()
    results = []
    async with _server(args) as server:
        seed = args.seed
        while not results or time.monotonic() - began < args.duration:
            result = await _one(args, seed, server)
            print(json.dumps(result), flush=True)
            results.append(result)
            seed += 1
    print(json.dumps(_summary(results, time.monotonic() - began)), flush=True)
    return 1 if any(r["violations"] for r in results) else 0


def _interrupt(signum: int, _frame: object) -> None:
    # SIGTERM as Ctrl-C: asyncio.run cancels the run, whose finally blocks kill the
    # workers' process groups and stop the private server
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(asyncio.run(main(sys.argv[1:])))
