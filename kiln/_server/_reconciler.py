"""Reconciler: what the database says this server runs against what it runs.

A claim whose commit succeeded but whose reply was lost (a cut connection, a claim
that timed out on the client) leaves jobs ``running`` under this server's id while
no pool holds them; the rescuer never touches them, since the server is alive. So
every ``interval`` (max(heartbeat_interval, dead_after/4)), while its heartbeat is
confirmed, the server reads its running jobs (one indexed query, at most ``limit``
rows) whose attempt began more than ``margin`` ago, and compares them with what its
pools and completer hold.

Each job it does not hold is settled: when the completer kept a result of that very
attempt that applied nothing (its claim's commit was unknown when it was written),
that result is written again; otherwise the job is handed back, without using an
attempt: it never started here (or its result could not be written at all, and then
it runs again). Both are fenced on server and attempt like any result, so a job that
moved on meanwhile changes nothing.

A claim still in flight may be the one whose rows are missing: when a pool's claim
has been in flight for more than half the margin the pass does nothing, so a late
reply can never meet a job already handed back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kiln._errors import KilnError
from kiln._events import EventHub, JobReconciled, StoreFailed
from kiln._model._job import JobResult, Outcome, RunningJob
from kiln._server._completer import Completer
from kiln._server._identity import Identity
from kiln._server._pool import Pool
from kiln._server._service import PeriodicService
from kiln.stores import Store

log = logging.getLogger("kiln.reconciler")
LIMIT = 1_000  # running jobs read per pass; more than any server's concurrency


class Reconciler(PeriodicService):
    name = "reconciler"

    def __init__(
        self,
        *,
        store: Store,
        events: EventHub,
        completer: Completer,
        pools: Callable[[], Iterable[Pool]],
        identity: Identity,
        may_run: Callable[[], bool],
        interval: float,
        margin: float,
    ) -> None:
        super().__init__(interval, events)
        self._store = store
        self._hub = events
        self._completer = completer
        self._pools = pools
        self._identity = identity
        self._may_run = may_run
        self.margin = margin
        self.reconciled = 0

    def may_run(self) -> bool:
        return self._may_run()

    def first_delay(self) -> float:
        return self.interval

    async def run_once(self) -> dict[str, int]:
        server_id = self._identity.id
        try:
            rows = await self._store.jobs_running_on(server_id, self.margin, LIMIT)
        except (KilnError, OSError) as exc:
            self._hub.emit(StoreFailed(operation="jobs_running_on", error=exc))
            return {"errors": 1}
        if not rows or server_id != self._identity.id or not self._may_run():
            return {}
        if self._claim_in_flight():
            return {"deferred": len(rows)}
        held = self._completer.held()
        for pool in self._pools():
            held |= pool.held()
        orphans = [r for r in rows if r.id not in held]
        for row in orphans:
            self._settle(row, server_id)
        return {"reconciled": len(orphans)} if orphans else {}

    def _claim_in_flight(self) -> bool:
        ages = (pool.claim_age() for pool in self._pools())
        return any(age is not None and age > self.margin / 2 for age in ages)

    def _settle(self, row: RunningJob, server_id: str) -> None:
        kept = self._completer.take_unapplied(row.id, row.attempt)
        if kept is not None and kept.server_id == server_id:
            action, result = "result_written", kept
        else:
            action = "handed_back"
            result = JobResult(job_id=row.id, server_id=server_id, attempt=row.attempt,
                               outcome=Outcome.HANDED_BACK)
        self.reconciled += 1
        log.warning("job %s (attempt %s) runs under this server in the database but not "
                    "here: %s", row.id, row.attempt, action.replace("_", " "))
        self._completer.push(result)
        self._hub.emit(JobReconciled(job_id=row.id, queue=row.queue, kind=row.kind,
                                     attempt=row.attempt, action=action))
