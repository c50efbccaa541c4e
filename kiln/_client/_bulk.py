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
from collections.abc import Callable, Sequence

from kiln._client._client import Client
from kiln._client._filters import audit_detail
from kiln._errors import ValidationError
from kiln._model import _idset
from kiln._model._job import DEAD_AFTER, FINISHED_STATES, JobFilter
from kiln._model._tags import check_filter
from kiln._model._wakeup import CANCEL_PAYLOAD

ACTIONS = ("requeue", "cancel", "delete")
VERBS = {"requeue": "requeued", "cancel": "cancelled", "delete": "deleted"}
BATCH = 1000  # jobs per batch (and per transaction); at most 1000, the listing's limit
ID_PAGE = 10_000  # ids per read when collecting a bound set (matching_ids)


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


async def matching_ids(client: Client, f: JobFilter) -> list[int]:
    """The ids of the jobs the bound filter ``f`` matches now, newest first (keyset pages
    of ``job_ids``, which read no row's columns)."""
    if f.max_id is None:
        raise ValidationError("matching_ids needs a max_id bound (see bound)")
    ids: list[int] = []
    cursor = f.max_id + 1
    while True:
        page = await client._store.job_ids(f, ID_PAGE, cursor)
        ids.extend(page)
        if len(page) < ID_PAGE:
            return ids
        cursor = page[-1]


def digest(ids: Sequence[int]) -> str:
    """A short fingerprint of a set of job ids: what a confirmation page showed, so the
    action can refuse when the set that matches has changed since (any job in or out).
    Equal to ``counted``'s for the same set (kiln._model._idset)."""
    return _idset.digest(ids)


async def counted(client: Client, f: JobFilter) -> tuple[JobFilter, int, str]:
    """``f`` bound to the jobs that match it now (as ``bound``), how many those are, and
    the fingerprint of their ids: one aggregate in the database, which reads no id out
    (a confirmation page over 100,000 jobs)."""
    f = check_filter(f)
    if bool(f.states) and all(s in FINISHED_STATES for s in f.states) \
            and f.finished_before is None:
        f = dataclasses.replace(f, finished_before=await client.now())
    sums = await client._store.job_id_sums(f)
    if f.max_id is None:
        f = dataclasses.replace(f, max_id=sums[1])
    return f, sums[0], _idset.fingerprint(*sums)


class Bulk:
    """One bulk action over the jobs of ``filter`` (bound already: see ``begin``); with
    ``only``, over those ids alone (each still checked against ``filter`` in its batch's
    transaction): a job that starts matching later is never touched."""

    def __init__(
        self, client: Client, action: str, filter: JobFilter, total: int, *,
        actor: str = "api", batch_size: int = BATCH, dead_after: float = DEAD_AFTER,
        only: Sequence[int] | None = None,
    ) -> None:
        if action not in ACTIONS:
            raise ValidationError(f"unknown bulk action {action!r}: use {', '.join(ACTIONS)}")
        if not 1 <= batch_size <= 1000:
            raise ValidationError(f"batch size must be between 1 and 1000, got {batch_size}")
        if filter.max_id is None:
            raise ValidationError(
                "a bulk action needs a max_id bound (see kiln._client._bulk.bound)"
            )
        self.client = client
        self.action = action
        self.filter = check_filter(filter)
        self.actor = actor
        self.batch_size = batch_size
        self.dead_after = dead_after
        self.run_id = uuid.uuid4().hex[:12]  # ties the audit entries of one run together
        self.progress = Progress(action, total)
        self.only = None if only is None else sorted(set(only), reverse=True)
        self._taken = 0

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
            ids = await self._next_ids(cursor)
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

    async def _next_ids(self, cursor: int) -> tuple[int, ...]:
        """The next batch's ids, below ``cursor``, newest first."""
        if self.only is None:
            return tuple(await self.client._store.job_ids(self.filter, self.batch_size, cursor))
        batch = tuple(self.only[self._taken:self._taken + self.batch_size])
        self._taken += len(batch)  # only is sorted newest first, as the cursor walks
        return batch

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
