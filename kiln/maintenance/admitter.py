"""Admitter: makes pending rate-limited jobs available as their keys' limits allow.

Every server runs one; the store serialises admission per key (a lock on the key, the
database clock read after it), so any number of admitters keep one global limit.
Before its first pass it declares the rate limits of this server's kinds, so jobs a
client inserted without knowing the limit are admitted under it.

A pass admits up to ``admit_batch`` jobs of each key with pending jobs, wakes the pools
of the queues that got jobs (and, through the server, other processes), and emits one
JobsAdmitted per key, queue and kind with each job's admission delay. It then sleeps
until the soonest key may admit again, and at most poll_interval.

A key with pending jobs and no declared rate limit admits nothing until some server or
client declares it (an enqueue may name a key that a service with the handlers
declares). The admitter says so instead of letting the jobs wait in silence: a warning
the first time it sees such a key (and again if it comes back after being declared),
and ``undeclared`` (keys) in its counts, so in its MaintenanceRan event, every pass.
Owns no SQL and no decision about how many jobs a key may admit: the store does.
"""

from __future__ import annotations

import logging

from kiln._config import seconds
from kiln._events import JobsAdmitted
from kiln._job import Admission
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

log = logging.getLogger("kiln.admitter")


class Admitter(PeriodicService):
    name = "admitter"

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(seconds(ctx.config.poll_interval), ctx.events)
        self._ctx = ctx
        self._batch = int(ctx.config.admit_batch)
        self._declared = False
        self._next_at: float | None = None  # seconds until some key may admit again
        self.admitted = 0
        self.undeclared: set[str] = set()  # keys with pending jobs and no rate limit

    async def declare(self) -> int:
        """Register the rate limit of every kind that has one; returns how many."""
        declared = 0
        for kind in self._ctx.kinds.values():
            if kind.rate_limit is not None:
                await self._ctx.store.rate_limit_declare(
                    kind.rate_key or kind.name, kind.rate_limit
                )
                declared += 1
        self._declared = True
        return declared

    async def run_once(self) -> dict[str, int]:
        """Admit one batch of every key with pending jobs; returns how many were admitted."""
        store = self._ctx.store
        if not self._declared:
            await self.declare()
        next_at: float | None = None
        released: dict[str, int] = {}
        keys = await store.rate_keys_pending()
        admitted = 0
        undeclared: set[str] = set()
        for key in keys:
            result = await store.jobs_admit(key, self._batch)
            if not result.declared:
                undeclared.add(key)
            if result.next_at is not None:
                next_at = result.next_at if next_at is None else min(next_at, result.next_at)
            for (queue, kind), delays in _grouped(result.admitted).items():
                released[queue] = released.get(queue, 0) + len(delays)
                self._ctx.events.emit(
                    JobsAdmitted(key=key, queue=queue, kind=kind, delays=tuple(delays))
                )
            admitted += len(result.admitted)
        self._next_at = next_at
        self.admitted += admitted
        if released:
            self._ctx.wake(released, "admitted")
        self._report_undeclared(undeclared)
        return {"admitted": admitted, "undeclared": len(undeclared)}

    def _report_undeclared(self, keys: set[str]) -> None:
        for key in sorted(keys - self.undeclared):
            log.warning(
                "jobs with rate key %r are pending, but no rate limit is declared for it:"
                " they wait until a kind (@app.job(..., rate_limit=...)) or an enqueue"
                " (rate_limit=...) declares one", key,
            )
        self.undeclared = keys

    def next_delay(self, counts: dict[str, int]) -> float:
        if self._next_at is None:
            return super().next_delay(counts)
        return min(self._next_at, self.interval)


def _grouped(admissions: list[Admission]) -> dict[tuple[str, str], list[float]]:
    groups: dict[tuple[str, str], list[float]] = {}
    for a in admissions:
        groups.setdefault((a.queue, a.kind), []).append(a.delay)
    return groups
