"""16 producers (8 processes of 2 threads, each thread its own App and connections)
enqueue the same unique job 1,000 times each, at once: exactly one row exists, and
every enqueue got its id."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.plugins.workers import ROOT
from tests.support.stores import count_jobs, migrate

PROCESSES, THREADS, ENQUEUES = 8, 2, 1000
PRODUCER = textwrap.dedent("""
    import json, os, sys, threading
    import kiln

    url, n = os.environ["KILN_DATABASE_URL"], int(sys.argv[1])
    start = threading.Barrier(int(sys.argv[2]))
    out = []

    def produce():
        app = kiln.App(url, known_kinds_only=False)
        unique = kiln.Unique(by=("args.tenant",))
        start.wait()
        ids = [app.enqueue("report.build", {"tenant": 42}, unique=unique) for _ in range(n)]
        out.append([sorted({int(i) for i in ids}), sum(1 for i in ids if i.inserted)])
        app.close()

    threads = [threading.Thread(target=produce) for _ in range(int(sys.argv[2]))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print(json.dumps(out))
""")


@pytest.mark.timeout(300)
def test_sixteen_producers_make_exactly_one_row(store_url: str) -> None:
    asyncio.run(migrate(store_url))
    env = dict(os.environ, KILN_DATABASE_URL=store_url, PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen([sys.executable, "-c", PRODUCER, str(ENQUEUES), str(THREADS)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(PROCESSES)
    ]
    ids: set[int] = set()
    inserted = 0
    for proc in procs:
        out, err = proc.communicate(timeout=280)
        assert proc.returncode == 0, err
        for thread_ids, thread_inserted in json.loads(out):
            ids.update(thread_ids)
            inserted += thread_inserted
    assert len(ids) == 1, ids  # every one of the 16,000 enqueues got the one job's id
    assert inserted == 1  # and exactly one of them says it inserted it
    assert asyncio.run(count_jobs(store_url)) == 1
