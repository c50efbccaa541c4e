"""What a Django task's ``.enqueue()`` on kiln's backend costs beside the Django App's
``enqueue`` of the same job, on SQLite, PostgreSQL and MariaDB (the test site of
tests/frameworks: fresh PostgreSQL schema and MariaDB database, dropped after).

``python -m bench.bench_django_tasks [N]``: per store, the median and p99 of N calls
(default 300, after one warm-up) of ``task.enqueue``, ``app.enqueue``, ``task.enqueue``
inside ``transaction.atomic()`` (the block's commit included), and ``enqueue`` then
``get_result``. One process, sequential calls: latency, not throughput.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tests.frameworks import django_site
from tests.plugins.databases import mysql_database_url, postgres_schema_url


def per_call(fn: Callable[[], Any], n: int) -> tuple[float, float]:
    fn()  # warm-up
    times = []
    for _ in range(n):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3, statistics.quantiles(times, n=100)[98] * 1e3


def run(alias: str, n: int) -> str:
    from django.db import transaction

    from kiln.contrib.django.tasks import kiln_app
    from tests.frameworks import django_tasks_defs

    add = django_tasks_defs.add.using(backend=alias)
    app = kiln_app(alias)

    def in_atomic() -> None:
        with transaction.atomic(using=alias):
            add.enqueue(1, 2)

    cases: dict[str, Callable[[], Any]] = {
        "task.enqueue": lambda: add.enqueue(1, 2),
        "app.enqueue": lambda: app.enqueue(add.module_path, {"args": [1, 2], "kwargs": {}},
                                           max_attempts=1),
        "task.enqueue in atomic()": in_atomic,
        "enqueue + get_result": lambda: add.get_result(add.enqueue(1, 2).id),
    }
    parts = [f"{name} {p50:.2f}/{p99:.2f} ms" for name, (p50, p99) in
             ((name, per_call(fn, n)) for name, fn in cases.items())]
    return f"{alias:8} " + " | ".join(parts) + " (p50/p99)"


def main(argv: list[str]) -> None:
    n = int(argv[0]) if argv else 300
    pg, my = postgres_schema_url(), mysql_database_url()
    django_site.configure(next(pg), next(my))
    try:
        for alias in ("default", "pg", "my"):
            print(run(alias, n), flush=True)
    finally:
        from django.db import connections

        connections.close_all()
        next(pg, None)
        next(my, None)


if __name__ == "__main__":
    main(sys.argv[1:])
