"""Adopter: applies this server's declarations to the jobs that wait, once they are the
ones in use (kiln._model._adoption; docs/operating.md, "What happens to jobs in flight
when a declaration changes between deploys").

Every server runs one. A pass reads the declaration in use of every kind (the one
producers use: the newest a live server published) and, for each kind this server
declares that way:

- **adopts** the jobs enqueued without any declaration: each option the producer did
  not give takes the declaration's value (queue, attempts, priority, timeout, tags,
  rate limit, concurrency key), and its pools (and the fleet) are woken;
- a kind **without a limit**: its available jobs that still carry a concurrency key
  (enqueued while it had one, or by a producer of the old version during a rolling
  deploy) lose it, so they run;
- a kind **with a limit**: every key row of the kind gets its max (a max changed in a
  deploy applies to the keys already queued, whichever version enqueued them last);
  and when the limit differs from the one in use before this server published
  (``rekey``: added, or its key changed), the waiting jobs get the key it gives
  them, ``REKEY_BATCH`` jobs per store call, at most ``MAX_BATCHES`` per pass.

A kind whose declaration in use is another server's (a conflict, ``kiln kinds``) is
that server's to apply. A pass costs a read of the published declarations, one of the
waiting undeclared jobs (an index that holds only them) and two statements over the key
rows. The first pass runs as the server starts, before its pools claim anything; then
every max(poll_interval, dead_after / 4), or poll_interval while a pass stopped at its
bound. Owns no SQL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kiln._events import MaintenanceRan
from kiln._model._adoption import WaitingJob, adoption, rekeyed
from kiln._model._job import KindDeclaration
from kiln._model._kinds import Kind
from kiln._server._config import seconds
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

log = logging.getLogger("kiln.adopter")

ADOPT_BATCH = 500  # undeclared jobs read per store call
REKEY_BATCH = 500  # waiting jobs of a kind read per store call when its limit changed
MAX_BATCHES = 20  # per pass and purpose: keeps one pass bounded; the next one goes on


def limits_changed(kinds: Mapping[str, Kind], before: Iterable[KindDeclaration]) -> set[str]:
    """The kinds of ``kinds`` with a limit whose published limit was another (or none)
    before this server published: their waiting jobs may carry another key, or none."""
    previous = {d.kind: d.options.get("concurrency") for d in before}
    return {
        name for name, kind in kinds.items()
        if kind.concurrency is not None
        and previous.get(name) != kind.concurrency.to_json()
    }


class Adopter(PeriodicService):
    name = "adopter"

    def __init__(self, ctx: ServerContext) -> None:
        cfg = ctx.config
        super().__init__(max(seconds(cfg.poll_interval), seconds(cfg.dead_after) / 4),
                         ctx.events)
        self._ctx = ctx
        self._digests = {name: k.declaration().digest for name, k in ctx.kinds.items()}
        self._cursors: dict[str, int] = {}  # kind -> the last job id rekeyed
        self._behind = False  # the last pass stopped at its bound
        self.adopted = 0
        self.unkeyed = 0
        self.rekeyed = 0

    async def start(self) -> None:
        """The first pass, before the service's loop and before the server's pools
        start (services start first): jobs to adopt or key are, up to a pass's bound,
        before any claim could take them as they are."""
        if self._task is None:
            try:
                counts = await self.run_once()
            except Exception:  # the loop tries again; a start does not fail for it
                self.errors += 1
                log.exception("adopter failed its first pass; trying again next round")
                counts = {"errors": 1}
            if self.events is not None and any(counts.values()):
                self.events.emit(MaintenanceRan(service=self.name, counts=counts))
        await super().start()

    def first_delay(self) -> float:
        return self.next_delay({})

    async def run_once(self) -> dict[str, int]:
        mine = await self._in_use()
        self._ctx.in_use.intersection_update(mine)
        self._ctx.in_use.update(mine)
        adopted = await self._adopt(mine)
        unlimited = sorted(n for n, k in mine.items() if k.concurrency is None)
        released = await self._ctx.store.jobs_unkey(unlimited) if unlimited else {}
        unkeyed = sum(released.values())
        if unkeyed:
            self.unkeyed += unkeyed
            log.info("%d job(s) of kinds without a concurrency limit now lost the key"
                     " they were enqueued with (%s)", unkeyed, ", ".join(unlimited))
            self._ctx.wake(released, "adopted")
        limits = {n: k.concurrency.max for n, k in mine.items() if k.concurrency is not None}
        resized = await self._ctx.store.concurrency_resize(limits) if limits else 0
        rekeyed = await self._rekey(mine)
        self._behind = adopted >= ADOPT_BATCH * MAX_BATCHES or bool(self._cursors)
        return {"adopted": adopted, "unkeyed": unkeyed, "resized": resized,
                "rekeyed": rekeyed}

    def next_delay(self, counts: dict[str, int]) -> float:
        """A pass that stopped at its bound is followed at poll_interval, not later."""
        if self._behind:
            return seconds(self._ctx.config.poll_interval)
        return super().next_delay(counts)

    async def _in_use(self) -> dict[str, Kind]:
        """This server's kinds whose declaration is the one in use."""
        newest = {d.kind: d.digest for d in await self._ctx.store.kind_declarations()}
        return {name: kind for name, kind in self._ctx.kinds.items()
                if newest.get(name) == self._digests[name]}

    async def _adopt(self, mine: Mapping[str, Kind]) -> int:
        store = self._ctx.store
        total = 0
        for _ in range(MAX_BATCHES):
            jobs = await store.jobs_undeclared(sorted(mine), ADOPT_BATCH)
            by_kind: dict[str, list[WaitingJob]] = {}
            for job in jobs:
                by_kind.setdefault(job.kind, []).append(job)
            for name, of_kind in sorted(by_kind.items()):
                released = await store.jobs_adopt(adoption(mine[name], of_kind))
                if released:
                    self._ctx.wake(released, "adopted")
            total += len(jobs)
            if len(jobs) < ADOPT_BATCH:
                break
        if total:
            self.adopted += total
            log.info("%d job(s) enqueued before their kind was declared now follow its"
                     " declaration", total)
        return total

    async def _rekey(self, mine: Mapping[str, Kind]) -> int:
        store = self._ctx.store
        total = 0
        for name in sorted(self._ctx.rekey & set(mine)):
            limit = mine[name].concurrency
            if limit is None:  # a rekey a later publish no longer needs
                self._ctx.rekey.discard(name)
                continue
            for _ in range(MAX_BATCHES):
                jobs = await store.jobs_waiting(name, self._cursors.get(name, 0), REKEY_BATCH)
                keys = rekeyed(name, limit, jobs)
                if keys:
                    total += await store.jobs_rekey(keys, {k: limit.max for k in keys.values()})
                if len(jobs) < REKEY_BATCH:
                    self._ctx.rekey.discard(name)
                    self._cursors.pop(name, None)
                    break
                self._cursors[name] = jobs[-1].id
        if total:
            self.rekeyed += total
            log.info("%d waiting job(s) took the concurrency key their kind's declaration"
                     " gives them now", total)
        return total
