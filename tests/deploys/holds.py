"""The locks a producer's own transaction can hold that kiln's writes need, one Hold
each (tests/deploys/contention.py runs them).

A new write of kiln's that can wait on a user's lock adds its Hold here: the jobs to
prepare, the statement the user's transaction runs, kiln's action during the hold if
the server's own writes are not the point, and what must become of the jobs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import kiln
from kiln import JobState
from tests.deploys.contention import HOLD, Bench


def _state(bench: Bench, job_id: int, want: JobState, what: str) -> list[str]:
    row = bench.rows.get(job_id)
    if row is None:
        return [f"{what} (job {job_id}) is gone"]
    if row.state is not want:
        return [f"{what} (job {job_id}) ended {row.state.value}, expected {want.value}: "
                f"{[e.error[:200] for e in row.errors]}"]
    return []


def _started_after(bench: Bench, job_id: int, t: float, what: str) -> list[str]:
    starts = [ln["t"] for ln in bench.ledger.lines if ln["ev"] == "start" and ln["job"] == job_id]
    if starts and min(starts) < t:
        return [f"{what} (job {job_id}) started {t - min(starts):.2f}s before the producer "
                "committed"]
    return []


class Dependency:
    """The user's transaction enqueues a job that depends on a running one: the
    dependency's row stays locked (marked as having dependents) until it commits, while
    the running job's handler returns and its result is written."""

    name = "dependency"
    xfail: dict[str, str] = {}

    def __init__(self) -> None:
        self.parent = self.child = 0

    async def prepare(self, bench: Bench) -> None:
        self.parent = await bench.app.aenqueue("c.parent", {"seconds": 0.8})
        bench.note("c.parent", self.parent)
        await bench.started(self.parent)

    def hold(self, bench: Bench, conn: Any) -> None:
        self.child = bench.app.enqueue("c.child", {"seconds": 0.05}, depends_on=[self.parent],
                                       conn=conn)
        bench.note("c.child", self.child)

    async def during(self, bench: Bench) -> None:
        pass

    def expect(self, bench: Bench) -> list[str]:
        out = _state(bench, self.parent, JobState.COMPLETED, "the dependency")
        row = bench.rows.get(self.parent)
        if not out and row is not None and row.result != {"version": "c"}:
            out.append(f"the dependency's result is {row.result!r}")
        return out + _state(bench, self.child, JobState.COMPLETED, "the dependent") \
            + _started_after(bench, self.child, bench.committed_at, "the dependent")


class UniqueDuplicate:
    """The user's transaction enqueues a duplicate of a running unique job: the call
    returns the running job's id (on MariaDB its row is locked by the duplicate-key
    check until the commit) while the running job completes."""

    name = "unique key"
    # found by this tier (not in issue 39's list), on MariaDB: InnoDB's duplicate check
    # locks the key's entry and the gap before it. With kiln_jobs_unique ascending, the
    # NULLs of every job without a key (and the next one's place) sorted into the gap
    # before the smallest key, so every plain insert waited for the user's commit
    # (migration 0014 makes the index descending); and the admitter's locking read of a
    # key's pending jobs waited on the holder's row (it skips locked rows now).
    # PostgreSQL: ON CONFLICT DO NOTHING takes no lock on the holder.
    xfail: dict[str, str] = {}

    def __init__(self) -> None:
        self.holder = 0
        self.duplicate: kiln.EnqueueResult | None = None

    async def prepare(self, bench: Bench) -> None:
        self.holder = await bench.app.aenqueue("c.unique", {"key": 5, "seconds": 0.8})
        bench.note("c.unique", self.holder)
        await bench.started(self.holder)

    def hold(self, bench: Bench, conn: Any) -> None:
        self.duplicate = bench.app.enqueue("c.unique", {"key": 5, "seconds": 0.8}, conn=conn)

    async def during(self, bench: Bench) -> None:
        pass

    def expect(self, bench: Bench) -> list[str]:
        out = _state(bench, self.holder, JobState.COMPLETED, "the running unique job")
        if self.duplicate is None or self.duplicate.inserted or self.duplicate != self.holder:
            out.append(f"the duplicate enqueue returned {self.duplicate!r} (inserted: "
                       f"{getattr(self.duplicate, 'inserted', None)}), expected the running "
                       f"job's id {self.holder}, not inserted")
        return out


class Requeue:
    """The user's transaction enqueues a unique job whose key a cancelled job had; an
    operator requeues the cancelled jobs of that kind just before the producer commits,
    so kiln's requeue waits on the uncommitted key. The key is then held: the requeue
    leaves that job cancelled and puts the other back, and fails on neither."""

    name = "requeue"
    xfail: dict[str, str] = {}
    BEFORE_COMMIT = 0.5  # seconds: the requeue waits less than the timeout

    def __init__(self) -> None:
        self.cancelled: list[int] = []
        self.new = 0
        self.moved: int | None = None
        self.error: BaseException | None = None

    async def prepare(self, bench: Bench) -> None:
        for key in (1, 2):
            self.cancelled.append(await bench.app.aenqueue(
                "c.unique", {"key": key, "seconds": 0.05}, delay=3600))
        await bench.app.client().cancel(kiln.filter_of(ids=self.cancelled), actor="test")
        bench.unchecked.add(self.cancelled[0])  # its key will be held: it stays cancelled
        for job_id in self.cancelled:
            bench.note("c.unique", job_id)

    def hold(self, bench: Bench, conn: Any) -> None:
        self.new = bench.app.enqueue("c.unique", {"key": 1, "seconds": 0.05}, conn=conn)
        bench.note("c.unique", self.new)

    async def during(self, bench: Bench) -> None:
        await asyncio.sleep(max(0.0, bench.held_at + HOLD - self.BEFORE_COMMIT - time.time()))
        try:
            self.moved = await bench.app.client().requeue(
                kiln.filter_of(kind="c.unique", state="cancelled"), actor="test")
        except kiln.KilnError as exc:
            self.error = exc

    def expect(self, bench: Bench) -> list[str]:
        if self.error is not None:
            return [f"the requeue failed: {self.error!r}"]
        out = [] if self.moved == 1 else [f"the requeue moved {self.moved} jobs, expected 1"]
        return out + _state(bench, self.cancelled[0], JobState.CANCELLED,
                            "the cancelled job whose key the producer's job holds")


class RateKey:
    """The user's transaction enqueues a rate-limited job, which locks its key's row
    (the limit is declared with the insert) until it commits, while that key has
    pending jobs: the admitter must wait on that key alone and admit the others."""

    name = "rate key"
    xfail: dict[str, str] = {}

    async def prepare(self, bench: Bench) -> None:
        for _ in range(3):  # one admitted at once, the others pending half a second each
            bench.note("c.held", await bench.app.aenqueue("c.held", {"seconds": 0.05}))

    def hold(self, bench: Bench, conn: Any) -> None:
        bench.note("c.held", bench.app.enqueue("c.held", {"seconds": 0.05}, conn=conn))

    async def during(self, bench: Bench) -> None:
        pass

    def expect(self, bench: Bench) -> list[str]:
        return []


HOLDS: list[type[Dependency | UniqueDuplicate | Requeue | RateKey]] = [
    Dependency, UniqueDuplicate, Requeue, RateKey,
]
