"""PostgreSQL: a limited claim whose snapshot predates another claim's commit.

The limited claim counts running jobs in its own snapshot, taken before it locks the
key's (or the queue's) row, and trusts the count only when the row it locked is the
version that snapshot sees (kiln/stores/postgres/_concurrency.py). Here claim A holds
the row and takes the last free slot; claim B starts meanwhile (its snapshot sees the
slot free), waits (a pg_sleep added before its locks, the one change to the store's
statement) until A has committed, then locks the row: a new version, so B takes
nothing. Without the version check B would take a job of another kind under the same
limit, and two jobs would run under a max of 1.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from kiln.stores import Store
from kiln.stores.postgres._concurrency import (
    CLAIM_LIMITED,
    CLAIM_NAMES,
    CLAIM_QUEUE_LIMITED,
    CLAIM_SQL,
    _positional,
)
from tests.stores.factories import insert, job

PAUSE = 0.6  # seconds B waits after its snapshot, before its locks


@pytest.fixture
def pg_url(backend: str, store_url: str) -> Iterator[str]:
    if backend != "postgresql":
        pytest.skip("postgres only: its claim counts in a snapshot taken before the lock")
    yield store_url


def _late(sql: str, pauses: int = 2) -> str:
    """The store's statement, made to sleep before it locks anything (an InitPlan in
    the quals of its locking scans, evaluated before their first row is locked)."""
    late = "(SELECT pg_sleep(%(pause)s)) IS NOT NULL"
    out = sql.replace("  WHERE (SELECT 1 FROM kiln_jobs j",
                      f"  WHERE {late} AND (SELECT 1 FROM kiln_jobs j", 1)
    for qkey in ("%(qkey)s", "(SELECT qkey FROM prm)"):  # as sent, or through prm
        out = out.replace(f"  WHERE conc_key = {qkey} FOR UPDATE SKIP LOCKED",
                          f"  WHERE {late} AND conc_key = {qkey} FOR UPDATE SKIP LOCKED", 1)
    assert out.count("pg_sleep") == pauses, "the statement changed: place the pause again"
    return out


def _params(kind: str, server: str) -> dict[str, Any]:
    return {"qkey": "queue:q", "q": "q", "kinds": [kind], "limit": 5, "server": server,
            "pause": PAUSE}


@pytest.mark.parametrize("limit", ["key", "queue", "queue, claim without keys"])
async def test_a_claim_never_counts_past_a_commit_it_did_not_see(
    pg_url: str, store: Store, limit: str
) -> None:
    # one limit of 1 over two kinds: a key both kinds' jobs carry, or the queue's own
    # (B's claim the full statement, or the one for pools without keys of their own)
    a_job, b_job = job(kind="ka"), job(kind="kb")
    if limit == "key":
        for new in (a_job, b_job):
            new.conc_key, new.conc_max = "kind:shared", 1
    else:
        await store.concurrency_declare({"queue:q": 1})
    await insert(store, a_job, b_job)
    keys = not limit.endswith("without keys")
    late = _late(CLAIM_LIMITED) if keys else _late(CLAIM_QUEUE_LIMITED, pauses=1)
    late_sql, late_names = _positional(late)
    b_rows: list[Any] = []

    def claim_b() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            p = _params("kb", "s2")
            b_rows.extend(conn.execute(late_sql, tuple(p[n] for n in late_names)).fetchall())

    with psycopg.connect(pg_url) as a:  # A: its claim in a transaction left open
        p = _params("ka", "s1")
        taken = a.execute(CLAIM_SQL, tuple(p[n] for n in CLAIM_NAMES)).fetchall()
        assert len(taken) == 1
        b = threading.Thread(target=claim_b)
        b.start()
        time.sleep(PAUSE / 3)  # B has its snapshot (A's claim not in it) and sleeps
        a.commit()
        b.join(10)
    assert not b.is_alive()
    assert b_rows == []  # the row B locked is not the version its snapshot counted in
    with psycopg.connect(pg_url, autocommit=True) as conn:
        running = conn.execute("SELECT count(*) FROM kiln_jobs WHERE state = 'running'"
                               ).fetchall()[0][0]
        assert running == 1
        # the next claim, with a fresh snapshot, sees the slot taken; once it is
        # free, B's job goes
        assert await store.job_claim("q", ["kb"], 5, "s2", limited=True, keys=keys) == []
        conn.execute("UPDATE kiln_jobs SET state = 'completed' WHERE state = 'running'")
    assert len(await store.job_claim("q", ["kb"], 5, "s2", limited=True, keys=keys)) == 1
