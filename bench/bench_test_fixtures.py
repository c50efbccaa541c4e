"""What the test suite's database fixtures cost per test (tests/plugins/pool.py).

Each MySQL or PostgreSQL test takes a pooled database: it is emptied before the test
(``reset``) and its schema compared after it (``fingerprint``); a test that changed the
schema has it dropped, and the next test waits for a new one to be migrated (``make``
and ``drop``). PyMySQL's ``connect`` is measured both ways, as PyMySQL does by default
(a TLS context built for every connection, the system's CA bundle loaded) and with
``ssl_disabled`` (what the test plugins use), interleaved, wall and process CPU.

Prints one JSON line per measurement: the medians in milliseconds over ``--repeats``
and the machine's load average when it ran.

    python -m bench.bench_test_fixtures --repeats 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from tests.plugins import databases, pool


def _timed(call: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def _print(name: str, samples: dict[str, list[tuple[float, float]]]) -> None:
    row: dict[str, Any] = {"measure": name}
    for label, values in samples.items():
        row[f"{label}_wall_ms"] = round(statistics.median(v[0] for v in values) * 1000, 1)
        row[f"{label}_cpu_ms"] = round(statistics.median(v[1] for v in values) * 1000, 1)
    row["load"] = os.getloadavg()[0]
    print(json.dumps(row), flush=True)


def pooled(backend: str, repeats: int) -> None:
    made = pool._make(backend)
    try:
        samples: dict[str, list[tuple[float, float]]] = {"reset": [], "fingerprint": []}
        for _ in range(repeats):
            samples["reset"].append(_timed(lambda: pool._reset(made)))
            samples["fingerprint"].append(_timed(lambda: pool._fingerprint(made)))
        _print(f"pool {backend}", samples)
    finally:
        pool._drop(made)
    new: dict[str, list[tuple[float, float]]] = {"make": [], "drop": []}
    box: list[pool.Pooled] = []
    for _ in range(max(1, repeats // 3)):
        new["make"].append(_timed(lambda: box.append(pool._make(backend))))
        new["drop"].append(_timed(lambda: pool._drop(box.pop())))
    _print(f"new database {backend}", new)


def pymysql_connect(repeats: int) -> None:
    samples: dict[str, list[tuple[float, float]]] = {"default": [], "ssl_disabled": []}
    for _ in range(repeats):
        for label, options in (("default", {"ssl_disabled": False}),
                               ("ssl_disabled", {"ssl_disabled": True})):
            samples[label].append(_timed(
                lambda options=options: databases.mysql_connect(  # type: ignore[misc]
                    databases.MYSQL_URL, database=False, **options).close()))
    _print("pymysql connect", samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--backends", default="postgres,mysql")
    args = parser.parse_args()
    backends = args.backends.split(",")
    if "mysql" in backends:
        pymysql_connect(args.repeats)
    for backend in backends:
        pooled(backend, args.repeats)


if __name__ == "__main__":
    main()
