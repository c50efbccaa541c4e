"""Turns kiln's events into counter and histogram updates.

Owns one inline event subscriber per observed hub (a server's or a client's). It runs
on the emitter's thread for every event, so it must be cheap: the per-job counters
(claimed, finished, retried, handed back) are Tally cells, a dict lookup and an add,
exported through observable counters; the rare ones are plain OpenTelemetry
counters; histograms are the only per-job OpenTelemetry calls. Attribute dicts are
built once per (queue, kind, outcome) and reused. It never does I/O; the only other
thing it does is poke the counts cache, which at most schedules a background refresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.metrics import Meter

from kiln import (
    ClaimQueried,
    Event,
    Fenced,
    Heartbeat,
    JobClaimed,
    JobFinished,
    JobRescued,
    JobsAdmitted,
    JobsEnqueued,
    LeaderChanged,
    NotifierChanged,
    Outcome,
    StoreFailed,
)
from kilnotel import _names as n
from kilnotel._counts import CountsCache
from kilnotel._gauges import ServerSource
from kilnotel._instruments import counter, histogram, tally

Attrs = dict[str, str]


class EventMetrics:
    """An inline subscriber: ``hub.subscribe(EventMetrics(meter, ...))``."""

    def __init__(
        self,
        provider: Any,
        meter: Meter,
        counts: CountsCache | None = None,
        source: ServerSource | None = None,
    ) -> None:
        self._counts = counts
        self._source = source
        self.enqueued = counter(meter, n.JOBS_ENQUEUED)  # clients emit from any thread
        self.claimed = tally(provider, meter, n.JOBS_CLAIMED)
        self.finished = tally(provider, meter, n.JOBS_FINISHED)
        self.retried = tally(provider, meter, n.JOBS_RETRIED)
        self.handed_back = tally(provider, meter, n.JOBS_HANDED_BACK)
        self.rescued = counter(meter, n.JOBS_RESCUED)
        self.db_errors = counter(meter, n.DB_ERRORS)
        self.heartbeat_failures = counter(meter, n.SERVER_HEARTBEAT_FAILURES)
        self.leader_changes = counter(meter, n.SERVER_LEADER_CHANGES)
        self.fenced = counter(meter, n.SERVER_FENCED)
        self.claim_latency = histogram(meter, n.CLAIM_LATENCY)
        self.claim_duration = histogram(meter, n.CLAIM_DURATION)
        self.admission_delay = histogram(meter, n.ADMISSION_DELAY)
        self.job_duration = histogram(meter, n.JOB_DURATION)
        self._attrs: dict[tuple[str, ...], Attrs] = {}
        self._handlers: dict[type[Event], Callable[[Any], None]] = {
            JobClaimed: self._claimed,
            JobFinished: self._finished,
            ClaimQueried: self._claim_queried,
            JobsEnqueued: self._enqueued,
            JobRescued: self._rescued,
            JobsAdmitted: self._admitted,
            StoreFailed: self._store_failed,
            Heartbeat: self._heartbeat,
            LeaderChanged: self._leader,
            Fenced: lambda e: self.fenced.add(1),
            NotifierChanged: self._notifier,
        }

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    # attribute dicts, built once ------------------------------------------------------
    def _qk(self, queue: str, kind: str) -> Attrs:
        key = (queue, kind)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = self._attrs[key] = {n.QUEUE: queue, n.KIND: kind}
            if self._counts is not None:
                self._counts.add_queue(queue)
        return attrs

    def _qko(self, queue: str, kind: str, outcome: str) -> Attrs:
        key = (queue, kind, outcome)
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = self._attrs[key] = {n.QUEUE: queue, n.KIND: kind, n.OUTCOME: outcome}
        return attrs

    def _one(self, name: str, value: str) -> Attrs:
        key = (name, value, "")
        attrs = self._attrs.get(key)
        if attrs is None:
            attrs = self._attrs[key] = {name: value}
        return attrs

    # handlers -----------------------------------------------------------------------------
    def _claimed(self, e: JobClaimed) -> None:
        row = e.job
        cell = self.claimed.cell((row.queue, row.kind), lambda: self._qk(row.queue, row.kind))
        cell[1] += 1
        self.claim_latency.record(e.latency, cell[0])

    def _finished(self, e: JobFinished) -> None:
        row, outcome = e.job, e.outcome
        cell = self.finished.cell(
            (row.queue, row.kind, outcome.value),
            lambda: self._qko(row.queue, row.kind, outcome.value),
        )
        cell[1] += 1
        self.job_duration.record(e.duration, cell[0])
        if outcome is Outcome.RETRY:
            self.retried.cell((row.queue, row.kind), lambda: self._qk(row.queue, row.kind))[1] += 1
        elif outcome is Outcome.HANDED_BACK:
            handed = self.handed_back.cell(
                (row.queue, row.kind), lambda: self._qk(row.queue, row.kind)
            )
            handed[1] += 1

    def _claim_queried(self, e: ClaimQueried) -> None:
        self.claim_duration.record(e.duration, self._one(n.QUEUE, e.queue))
        if self._counts is not None:
            self._counts.poke()

    def _enqueued(self, e: JobsEnqueued) -> None:
        self.enqueued.add(e.count, self._qk(e.queue, e.kind))

    def _rescued(self, e: JobRescued) -> None:
        self.rescued.add(1, self._qko(e.job.queue, e.job.kind, e.outcome.value))

    def _admitted(self, e: JobsAdmitted) -> None:
        attrs = self._qk(e.queue, e.kind)
        for delay in e.delays:
            self.admission_delay.record(delay, attrs)

    def _store_failed(self, e: StoreFailed) -> None:
        self.db_errors.add(1, self._one(n.OPERATION, e.operation))

    def _heartbeat(self, e: Heartbeat) -> None:
        if not e.ok:
            self.heartbeat_failures.add(1)
        if self._counts is not None:
            self._counts.poke()

    def _leader(self, e: LeaderChanged) -> None:
        self.leader_changes.add(1, self._one(n.CHANGE, "gained" if e.is_leader else "lost"))

    def _notifier(self, e: NotifierChanged) -> None:
        if self._source is not None:
            self._source.notifier_up = e.up
