"""Admitter: makes pending rate-limited jobs available as their keys' limits allow.

Every server runs one; the store serialises admission per key (a lock on the key, the
database clock read after it), so any number of admitters keep one global limit.
Before its first pass it declares the rate limits of this server's kinds, so jobs a
client inserted without knowing the limit are admitted under it.

A pass admits up to ``admit_batch`` jobs of each key with pending jobs, up to
KEYS_PER_CALL keys in one transaction, each job at the time its key's bucket allows it
within AHEAD seconds from now (later than now: scheduled, released at that time), wakes the pools
of the queues that got jobs (and, through the server, other processes), and emits one
JobsAdmitted per key, queue and kind with each job's admission delay. It then sleeps
until the soonest key may admit again, and at most poll_interval.

A key with pending jobs and no declared rate limit admits nothing until some server or
client declares it (an enqueue may name a key that a service with the handlers
declares). The admitter says so instead of letting the jobs wait in silence: a warning
the first time it sees such a key (and again if it comes back after being declared),
and ``undeclared`` (keys) in its counts, so in its MaintenanceRan event, every pass.
Nothing is admitted that cannot start: a pass admits only jobs of queues that a live
server serves (heartbeat within dead_after) and that are not paused, so a pause or an
outage does not pile up available jobs that would all start together when the queue
runs again (the two reads this takes are made only when keys have pending jobs).
One key never holds up another: a key whose admission fails (a stored limit this kiln
cannot keep, a lock or statement timeout) is skipped with a warning the first time and
``failed`` (keys) in the pass's counts, and a key whose row another transaction holds
is skipped by the store (``busy``) rather than waited on; the other keys are admitted.
Owns no SQL and no decision about how many jobs a key may admit: the store does.
"""

from __future__ import annotations

import logging

from kiln._events import JobsAdmitted
from kiln._model._job import Admission, AdmitResult
from kiln._server._config import seconds
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

log = logging.getLogger("kiln.admitter")

# Seconds a round admits ahead: each job the limit allows within this time from now is
# admitted at its own time (scheduled until then), so a fast key goes at its rate
# though rounds come tens of milliseconds apart (kiln.stores._admission). Short, since
# what was admitted ahead for a queue that then pauses or loses its workers starts at
# once when it runs again: it is part of the bound on starts (docs/rate-limits.md).
AHEAD = 0.2
KEYS_PER_CALL = 50  # keys admitted in one transaction (two round trips for them all)


class Admitter(PeriodicService):
    name = "admitter"

    def __init__(self, ctx: ServerContext, ahead: float | None = None) -> None:
        """``ahead``: seconds to admit ahead (None: AHEAD); 0 admits only what the
        limits allow now (kiln.testing's drain, which runs what is available and stops)."""
        super().__init__(seconds(ctx.config.poll_interval), ctx.events)
        self._ctx = ctx
        self._ahead = AHEAD if ahead is None else ahead
        self._batch = int(ctx.config.admit_batch)
        self._dead_after = seconds(ctx.config.dead_after)
        self._declared = False
        self._next_at: float | None = None  # seconds until some key may admit again
        self.admitted = 0
        self.undeclared: set[str] = set()  # keys with pending jobs and no rate limit
        self.failed: dict[str, BaseException] = {}  # keys whose admission failed last pass

    async def declare(self) -> int:
        """Register the rate limit of every kind that has one; returns how many."""
        declared = 0
        for kind in self._ctx.kinds.values():
            # a keyed limit (RateLimit(key=...)) is declared per key by each enqueue
            if kind.rate_limit is not None and kind.rate_limit.key is None:
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
        queues = await self._startable() if keys else None
        admitted = 0
        undeclared: set[str] = set()
        failed: dict[str, BaseException] = {}
        busy = 0
        results = await self._admit(keys, queues, failed)
        for key, result in results.items():
            busy += result.busy
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
        self._report_failed(failed)
        counts = {"admitted": admitted, "undeclared": len(undeclared)}
        if failed:
            counts["failed"] = len(failed)
        if busy:
            counts["busy"] = busy
        return counts

    async def _admit(
        self, keys: list[str], queues: list[str] | None, failed: dict[str, BaseException]
    ) -> dict[str, AdmitResult]:
        """Every key, KEYS_PER_CALL in one transaction; a call that fails is done again
        key by key, so that only the key at fault is skipped (``failed``)."""
        store = self._ctx.store
        results: dict[str, AdmitResult] = {}
        for start in range(0, len(keys), KEYS_PER_CALL):
            chunk = keys[start:start + KEYS_PER_CALL]
            try:
                results.update(await store.jobs_admit_keys(chunk, self._batch, queues,
                                                           self._ahead))
                continue
            except Exception:  # found below, key by key
                pass
            for key in chunk:
                try:
                    results[key] = await store.jobs_admit(key, self._batch, queues, self._ahead)
                except Exception as exc:  # this key only: the keys after it are admitted
                    failed[key] = exc
        return results

    async def _startable(self) -> list[str]:
        """The queues whose admitted jobs can start: served by a live server (heartbeat
        within dead_after, concurrency above 0) and not paused. Admitting for any other
        would let jobs pile up available and start together when it runs again."""
        store = self._ctx.store
        controls = await store.queue_controls()
        servers = await store.server_list()
        served = {q for s in servers if s.heartbeat_age is None or s.heartbeat_age
                  <= self._dead_after for q, n in s.queues.items() if n > 0}
        return sorted(q for q in served if not controls.paused(q))

    def _report_failed(self, failed: dict[str, BaseException]) -> None:
        """A warning the first time a key's admission fails (and again after it had
        recovered), with the error; the count is in every pass's MaintenanceRan."""
        for key in sorted(set(failed) - set(self.failed)):
            exc = failed[key]
            log.warning("admission of rate key %r failed; its jobs stay pending, other keys"
                        " go on: %s: %s", key, type(exc).__name__, exc)
        self.failed = failed

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
