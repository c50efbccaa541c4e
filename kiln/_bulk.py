"""Bulk actions in batches: requeue, cancel or delete every job a filter matches, a
million of them if need be, one short transaction per batch, with progress.

Owns ``Bulk`` and ``Progress``. A run is bound when it begins (``bound``): to the newest
job that matches then, and, when every state it selects is a finished one, to the jobs
that finished by then, so it touches what was counted and no more; a confirmation page
or a script passes those bounds back to act on exactly what it showed. Batches walk the
matching ids newest first (so that of two jobs of one unique key the newest goes back,
as in one requeue) with the stores' keyset listing of ids, ``job_ids``, which reads no
row's columns; each batch is one store call (one transaction) over its ids that still
match, then one audit entry with its count.
An interruption leaves every batch either applied whole or not at all, and a run again
with the same bounds finishes the rest. Writes no SQL: store methods only.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable

from kiln._client import Client, audit_detail
from kiln._errors import ValidationError
from kiln._job import FINISHED_STATES, JobFilter
from kiln._tags import check_filter
from kiln._wakeup import CANCEL_PAYLOAD
from kiln.stores._protocol import DEAD_AFTER

ACTIONS = ("requeue", "cancel", "delete")
VERBS = {"requeue": "requeued", "cancel": "cancelled", "delete": "deleted"}
BATCH = 1000  # jobs per batch (and per transaction); at most 1000, the listing's limit


@dataclasses.dataclass(frozen=True, slots=True)
class Progress:
    """Where a bulk run is: ``done`` jobs changed of ``total`` counted when it began;
    ``seen`` is how many its batches looked at (a job that no longer matched, or that
    requeue leaves alone, is seen, not done)."""

    action: str
    total: int
    done: int = 0
    seen: int = 0
    batches: int = 0
    finished: bool = False

    @property
    def fraction(self) -> float:
        return 1.0 if self.finished or not self.total else min(self.seen / self.total, 1.0)


ProgressCallback = Callable[[Progress], None]


async def bound(client: Client, f: JobFilter) -> JobFilter:
    """``f`` bounded to the jobs that match it now: by id (the newest matching one, unless
    ``f`` has a ``max_id``), and when every state it selects is a finished one, by finish
    time too (unless it has a ``finished_before``): a job requeued and failed again, or
    that arrives later, is left alone."""
    timed = bool(f.states) and all(s in FINISHED_STATES for s in f.states)
    if timed and f.finished_before is None:
        f = dataclasses.replace(f, finished_before=await client.now())
    if f.max_id is None:
        newest = await client.list(f, limit=1)
        f = dataclasses.replace(f, max_id=newest[0].id if newest else 0)
    return f


class Bulk:
    """One bulk action over the jobs of ``filter`` (bound already: see ``begin``)."""

    def __init__(
        self, client: Client, action: str, filter: JobFilter, total: int, *,
        actor: str = "api", batch_size: int = BATCH, dead_after: float = DEAD_AFTER,
    ) -> None:
        if action not in ACTIONS:
            raise ValidationError(f"unknown bulk action {action!r}: use {', '.join(ACTIONS)}")
        if not 1 <= batch_size <= 1000:
            raise ValidationError(f"batch size must be between 1 and 1000, got {batch_size}")
        if filter.max_id is None:
            raise ValidationError("a bulk action needs a max_id bound (see kiln._bulk.bound)")
        self.client = client
        self.action = action
        self.filter = check_filter(filter)
        self.actor = actor
        self.batch_size = batch_size
        self.dead_after = dead_after
        self.run_id = uuid.uuid4().hex[:12]  # ties the audit entries of one run together
        self.progress = Progress(action, total)

    @classmethod
    async def begin(
        cls, client: Client, action: str, filter: JobFilter, *,
        actor: str = "api", batch_size: int = BATCH, dead_after: float = DEAD_AFTER,
    ) -> Bulk:
        """Bound ``filter`` to what matches now (``bound``) and count it."""
        bounded = await bound(client, check_filter(filter))
        return cls(client, action, bounded, await client.count(bounded), actor=actor,
                   batch_size=batch_size, dead_after=dead_after)

    async def run(self, on_progress: ProgressCallback | None = None) -> Progress:
        """Apply every batch; ``on_progress`` after each one and at the end. An error
        propagates with the batches before it applied (``progress`` says how many)."""
        assert self.filter.max_id is not None
        cursor = self.filter.max_id + 1
        while True:
            ids = tuple(await self.client._store.job_ids(self.filter, self.batch_size, cursor))
            if not ids:
                break
            done = await self._apply(dataclasses.replace(self.filter, ids=ids))
            await self._audit(done, ids)
            p = self.progress
            self.progress = dataclasses.replace(
                p, done=p.done + done, seen=p.seen + len(ids), batches=p.batches + 1)
            cursor = ids[-1]  # newest first: the smallest id of the batch
            if on_progress is not None:
                on_progress(self.progress)
            if len(ids) < self.batch_size:
                break
        self.progress = dataclasses.replace(self.progress, finished=True)
        if on_progress is not None:
            on_progress(self.progress)
        return self.progress

    async def _apply(self, f: JobFilter) -> int:
        store = self.client._store  # the core reaches its own store
        if self.action == "requeue":
            return await store.jobs_requeue(f, self.dead_after)
        if self.action == "delete":
            return await store.jobs_delete(f)
        n = await store.jobs_cancel(f, self.actor)
        if n and self.client.bus is not None:  # wake the servers; the store's NOTIFY otherwise
            await self.client.bus.publish(CANCEL_PAYLOAD)
        return n

    async def _audit(self, n: int, ids: tuple[int, ...]) -> None:
        """One entry per batch, after its commit: the run, the batch, its id range."""
        detail = audit_detail(self.filter)
        detail.update(run=self.run_id, batch=self.progress.batches + 1,
                      total=self.progress.total, first_id=min(ids), last_id=max(ids))
        await self.client.record_audit(self.actor, self.action, n, detail)
