"""Scheduler: enqueues recurring jobs on their slots (leader only).

For each Recurring it reads the database clock, takes the latest slot not after it
and asks the store to enqueue that slot. ``cron_enqueue`` inserts the job only when
the slot is later than the last one recorded for the name, in the same transaction,
so every slot is enqueued at most once across all servers and leader changes, and a
deposed leader that has not noticed yet cannot enqueue an old slot again.

Slots missed while no leader ran (the cluster was down, or between leaders): only the
most recent one is enqueued, once, when a leader looks again. A schedule that has never
enqueued anything starts with its latest slot only when that slot is under
NEW_SCHEDULE_GRACE old; otherwise it waits for its next slot, so a new ``@daily`` job
deployed in the afternoon does not run at once.

A schedule whose kind no service declares (not this app's, and none published) is
refused as ``enqueue`` refuses it: nothing is enqueued for its slots, the log says so
once, and its latest slot is enqueued once a declaration appears. Owns no SQL.
"""

from __future__ import annotations

import logging
from datetime import datetime

from kiln._client._catalog import KindCatalog
from kiln._model._build import build_job
from kiln._model._job import NewJob
from kiln._model._kinds import Declaration, Kind
from kiln._model._recurring import Recurring
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

log = logging.getLogger("kiln.scheduler")

NEW_SCHEDULE_GRACE = 60.0  # seconds
MAX_SLEEP = 60.0  # seconds: look at the clock at least this often
EARLY = 0.005  # seconds: wake this long after a slot, not before it

SLOT_METADATA = "kiln.slot"
NAME_METADATA = "kiln.recurring"


def slot_job(
    item: Recurring, slot: datetime, ctx: ServerContext, declared: Kind | Declaration | None = None
) -> NewJob:
    """The job for one slot; its metadata names the schedule and the slot. A kind this
    server does not handle gets the declaration its servers published (``declared``)."""
    options = dict(item.options)
    metadata = dict(options.pop("metadata", None) or {})
    metadata[NAME_METADATA] = item.name
    metadata[SLOT_METADATA] = slot.isoformat()
    known = ctx.kinds if item.kind in ctx.kinds else None
    return build_job(item.kind, item.args, known, declared, metadata=metadata, **options)


class Scheduler(PeriodicService):
    name = "scheduler"

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(MAX_SLEEP, ctx.events)
        self._ctx = ctx
        self._items = list(ctx.recurring)
        self._catalog = KindCatalog(ctx.store, ctx.kinds)  # kinds other services handle
        self._last: dict[str, datetime | None] = {}  # last slot known enqueued, per name
        self._next_in = MAX_SLEEP
        self._refused: set[str] = set()  # schedules whose unknown kind was logged
        self.enqueued = 0

    async def start(self) -> None:
        self._last.clear()  # a new term: read what others did from the database
        await super().start()

    def next_delay(self, counts: dict[str, int]) -> float:
        if counts.get("errors"):
            return min(1.0, self._next_in)
        return self._next_in

    async def run_once(self) -> dict[str, int]:
        """Enqueue every schedule's latest slot that is not enqueued yet."""
        now = await self._ctx.store.now()
        enqueued = skipped = unknown = 0
        for item in self._items:
            slot = item.slot_at_or_before(now)
            if not await self._due(item, slot, now):
                continue
            await self._catalog.ensure((item.kind,))
            declared = self._catalog.get(item.kind)
            if declared is None:
                unknown += 1
                self._refuse(item, slot)
                continue
            self._refused.discard(item.name)
            job = slot_job(item, slot, self._ctx, declared)
            job_id = await self._ctx.store.cron_enqueue(item.name, slot, job)
            self._last[item.name] = slot
            if job_id is None:
                skipped += 1  # another leader got there first
            else:
                enqueued += 1
                self._ctx.wake({job.queue: 1}, "cron")
        self.enqueued += enqueued
        self._next_in = self._sleep_for(now)
        return {"enqueued": enqueued, "already": skipped, "unknown_kind": unknown}

    def _refuse(self, item: Recurring, slot: datetime) -> None:
        """A slot of a kind nobody declares is not enqueued (an orphan every slot, for a
        typo); the slot stays due, so it is enqueued once the kind is declared."""
        if item.name in self._refused:
            return
        self._refused.add(item.name)
        log.error("recurring job %r names kind %r, which neither this app nor any running "
                  "service declares: its slot %s is not enqueued (nor any later one until "
                  "the kind is declared); declare the kind or correct the schedule",
                  item.name, item.kind, slot.isoformat())

    async def _due(self, item: Recurring, slot: datetime, now: datetime) -> bool:
        if item.name not in self._last:
            self._last[item.name] = await self._ctx.store.cron_last_slot(item.name)
            if self._last[item.name] is None:  # never enqueued: only a fresh slot counts
                fresh = (now - slot).total_seconds() < NEW_SCHEDULE_GRACE
                if not fresh:
                    self._last[item.name] = slot
                return fresh
        last = self._last[item.name]
        return last is None or slot > last

    def _sleep_for(self, now: datetime) -> float:
        if not self._items:
            return MAX_SLEEP
        soonest = min(item.next_slot_after(now) for item in self._items)
        return min(max((soonest - now).total_seconds() + EARLY, EARLY), MAX_SLEEP)
