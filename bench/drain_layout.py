"""One queue's drain beside a backlog on SQLite or MariaDB: is it the table's size or
where the queue's jobs sit (issue #45; PostgreSQL's answer is bench/drain_costs.py
``--by-queue``)?

Builds three tables of the same store: ``--rows`` available jobs over 20 queues
interleaved (job g in queue g % 20, as bench/scale_backlog.py's backlog), the same jobs
stored queue by queue (job g in queue g * 20 // rows), and queue 3's share alone. Then
drains queue 3 from each through the store (4 claimers of 100 completing each batch, as
the backlog case does), ``--rounds`` times in alternating order (each round rebuilds),
and prints one JSON object: each drain's jobs/s and the ratios to the table alone.

    python -m bench.drain_layout --store sqlite --rows 2000000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from typing import Any

from bench.backlog_stores import Target
from bench.scale_backlog import drain_any, migrate

QUEUES, KINDS, QUEUE = 20, 100, 3


def build(db: Target, rows: int, layout: str) -> None:
    """``rows`` available jobs: ``layout`` "interleaved", "by_queue" or "alone" (queue
    QUEUE's share only). A job's kind is one of its queue's (k3, k23, ... for q3, as
    bench.scale_backlog.kinds_of has them), so the drain claims all of the queue."""
    db.prepare()
    g = "g" if db.kind == "sqlite" else "seq"
    queue = {"interleaved": f"{g} % {QUEUES}", "alone": str(QUEUE),
             "by_queue": f"{g} * {QUEUES} {'/' if db.kind == 'sqlite' else 'DIV'} {rows}"}[layout]
    kind = f"({queue}) + {QUEUES} * ({g} % {KINDS // QUEUES})"
    first, count = (QUEUE * rows // QUEUES, rows // QUEUES) if layout == "alone" else (0, rows)
    for lo in range(first, first + count, 250_000):
        hi = min(lo + 249_999, first + count - 1)
        if db.kind == "sqlite":
            db.execute(
                f"WITH RECURSIVE s(g) AS (SELECT {lo} UNION ALL SELECT g + 1 FROM s"
                f" WHERE g < {hi}) INSERT INTO kiln_jobs (queue, kind, state, args, params,"
                " metadata, errors, run_at, max_attempts, created_at)"
                f" SELECT 'q' || ({queue}), 'k' || ({kind}), 'available', json_object('n', g),"
                " '{}', '{}', '[]', unixepoch() - 3600, 3, unixepoch() - 3600 FROM s")
        else:
            db.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, errors,"
                f" run_at, max_attempts, created_at) SELECT CONCAT('q', {queue}),"
                f" CONCAT('k', {kind}), 'available', JSON_OBJECT('n', seq), '{{}}', '{{}}',"
                " '[]', UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, 3, UTC_TIMESTAMP(6)"
                f" FROM seq_{lo}_to_{hi}")
    db.analyze()


async def one(store: str, rows: int, layout: str) -> dict[str, Any]:
    db = Target(store, "kiln_drain_layout")
    try:
        await migrate(db.url)
        build(db, rows, layout)
        out = await drain_any(db.url, QUEUE)
        out["load_1m"] = round(os.getloadavg()[0], 1)
        return out
    finally:
        db.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "mariadb"), default="sqlite")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    a = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"interleaved": [], "by_queue": [], "alone": []}
    for r in range(a.rounds):
        order = list(runs) if r % 2 == 0 else list(reversed(runs))
        for layout in order:
            runs[layout].append(asyncio.run(one(a.store, a.rows, layout)))
    rate = {k: statistics.median(x["jobs_per_s"] for x in v) for k, v in runs.items()}
    print(json.dumps({
        "store": a.store, "rows": a.rows, "rounds": a.rounds, "runs": runs,
        "jobs_per_s": rate,
        "interleaved_over_alone": round(rate["interleaved"] / rate["alone"], 3),
        "by_queue_over_alone": round(rate["by_queue"] / rate["alone"], 3),
    }), flush=True)


if __name__ == "__main__":
    main()
