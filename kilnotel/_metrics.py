"""Turns kiln's events into counter and histogram updates.

Owns the event handlers that feed the counters and histograms of one observed hub (a
server's or a client's). They run inline on the emitter's thread for every event, so
they must be cheap: everything an event touches is looked up once per attribute set
(queue and kind, plus outcome) in a dict of slotted records built on first use; the
per-job counters are Tally cells (an add) and the histograms are recorders from
``_histograms`` (a bisect and two adds on the Prometheus path, one SDK ``record``
otherwise); the rare counters are plain OpenTelemetry counters. ``seed()`` exports
every counter at 0 for the label sets known up front, so Prometheus sees the first
increase of each. It never does I/O; the only other thing it does is poke the counts
cache, which at most schedules a background refresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.metrics import Meter

from kiln import Outcome
from kiln.events import (
    ClaimQueried,
    CompleterCrashed,
    Event,
    Fenced,
    HandlerStuck,
    Heartbeat,
    JobCancelled,
    JobClaimed,
    JobFinished,
    JobReconciled,
    JobRescued,
    JobsAdmitted,
    JobsEnqueued,
    JobsReleased,
    LeaderChanged,
    NotifierChanged,
    ResultDropped,
    ResultPoisoned,
    ResultsUnapplied,
    StoreFailed,
)
from kilnotel import _names as n
from kilnotel._counts import CountsCache
from kilnotel._exemplars import ExemplarOf, Traced, producer_of
from kilnotel._gauges import ServerSource
from kilnotel._histograms import Histogram, Recorder
from kilnotel._instruments import counter, shared, tally
from kilnotel._rate_keys import rate_key_tally

Attrs = dict[str, str]
Handlers = dict[type[Event], Callable[[Any], None]]
HistogramFactory = Callable[[n.Metric], Histogram]
RESCUE_OUTCOMES = (Outcome.RETRY.value, Outcome.FAILED.value)


def seed_pairs(
    queues: Iterable[str], kinds: Mapping[str, str], budget: int = n.SEED_BUDGET
) -> list[tuple[str, str]]:
    """The (queue, kind) pairs a server exports at 0 from the start (``kinds``: each
    kind's declared queue), at most ``budget`` series of ``kiln.jobs.finished`` (six
    outcomes per pair).

    Every served queue times every kind while that fits; past it, each kind's own queue
    (its declaration); past that too (hundreds of kinds on a few queues), a fair share
    of the budget per queue, the smallest queues first, so a queue of 50 kinds beside one
    of 350 keeps all 50 seeded. A kind left out is not lost: its series is born at its
    first event, within the other half of the limit.
    """
    served = sorted(set(queues))
    names = sorted(kinds)
    per_pair = len(n.OUTCOMES)
    if len(served) * len(names) * per_pair <= budget:
        return [(q, k) for q in served for k in names]
    own: dict[str, list[str]] = {q: [] for q in served}
    for kind in names:
        if kinds[kind] in own:
            own[kinds[kind]].append(kind)
    room = budget // per_pair
    pairs: list[tuple[str, str]] = []
    # water-filling: a queue takes what it needs up to an even share of what is left
    by_size = sorted(own.items(), key=lambda item: (len(item[1]), item[0]))
    for left, (queue, queue_kinds) in zip(range(len(by_size), 0, -1), by_size, strict=True):
        take = min(len(queue_kinds), room // left)
        pairs.extend((queue, kind) for kind in queue_kinds[:take])
        room -= take
    return sorted(pairs)


class _ByKind:
    """What the events of one (queue, kind) update; histogram recorders bound lazily,
    so a histogram series appears at its first observation, as in the SDK."""

    __slots__ = ("admission", "attrs", "claimed", "handed_back", "key", "latency", "retried")

    def __init__(self, key: tuple[str, str], attrs: Attrs, m: EventMetrics) -> None:
        self.key = key
        self.attrs = attrs
        self.claimed: list[Any] = m.claimed.cell(key, lambda: attrs)
        self.retried: list[Any] = m.retried.cell(key, lambda: attrs)
        self.handed_back: list[Any] = m.handed_back.cell(key, lambda: attrs)
        self.latency: Recorder | None = None
        self.admission: Recorder | None = None


class _ByOutcome:
    """What the events of one (queue, kind, outcome) update."""

    __slots__ = ("attrs", "by_kind", "duration", "finished", "key")

    def __init__(self, key: tuple[str, str, str], by_kind: _ByKind, m: EventMetrics) -> None:
        self.key = key
        self.by_kind = by_kind
        self.attrs = attrs = {**by_kind.attrs, n.OUTCOME: key[2]}
        self.finished: list[Any] = m.finished.cell(key, lambda: attrs)
        self.duration: Recorder | None = None


class EventMetrics:
    """Counters and histograms fed by one hub's events.

    ``handlers()`` maps event types to handlers (observe() merges them with the
    tracer's into one subscriber); calling the object dispatches one event.
    """

    def __init__(
        self,
        provider: Any,
        meter: Meter,
        histograms: HistogramFactory,
        counts: CountsCache | None = None,
        source: ServerSource | None = None,
        attempt_span: ExemplarOf | None = None,
    ) -> None:
        self._counts = counts
        self._source = source
        self._attempt_span = attempt_span
        self.enqueued = counter(meter, n.JOBS_ENQUEUED)  # clients emit from any thread
        self.claimed = tally(provider, meter, n.JOBS_CLAIMED)
        self.finished = tally(provider, meter, n.JOBS_FINISHED)
        self.retried = tally(provider, meter, n.JOBS_RETRIED)
        self.handed_back = tally(provider, meter, n.JOBS_HANDED_BACK)
        self.rescued = counter(meter, n.JOBS_RESCUED)
        self.stuck = counter(meter, n.JOBS_STUCK)
        self.stranded = counter(meter, n.JOBS_STRANDED)
        self.db_errors = counter(meter, n.DB_ERRORS)
        self.heartbeat_failures = counter(meter, n.SERVER_HEARTBEAT_FAILURES)
        self.leader_changes = counter(meter, n.SERVER_LEADER_CHANGES)
        self.fenced = counter(meter, n.SERVER_FENCED)
        self.poisoned = counter(meter, n.RESULTS_POISONED)
        self.dropped = counter(meter, n.RESULTS_DROPPED)
        self.unapplied = counter(meter, n.RESULTS_UNAPPLIED)
        self.completer_crashes = counter(meter, n.SERVER_COMPLETER_CRASHES)
        self.reconciled = counter(meter, n.JOBS_RECONCILED)
        self.claim_latency = histograms(n.CLAIM_LATENCY)
        self.claim_duration = histograms(n.CLAIM_DURATION)
        self.admission_delay = histograms(n.ADMISSION_DELAY)
        self.job_duration = histograms(n.JOB_DURATION)
        self.cancel_latency = histograms(n.CANCEL_LATENCY)
        self.rate_keys = shared(provider, "kilnotel.rate_keys", lambda: rate_key_tally(meter))
        self._cancels: dict[tuple[str, str], Recorder] = {}
        self._latency_traced = Traced(self.claim_latency)
        traced = Traced(self.job_duration)
        self._duration_traced = traced if attempt_span is not None and traced else None
        self._kinds: dict[tuple[str, str], _ByKind] = {}
        self._outcomes: dict[tuple[str, str, str], _ByOutcome] = {}
        self._claim_queries: dict[str, Recorder] = {}
        self._one: dict[tuple[str, str], Attrs] = {}
        self._handlers: Handlers = {
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
            HandlerStuck: lambda e: self.stuck.add(1, self._by_kind(e.job.queue, e.job.kind).attrs),
            NotifierChanged: self._notifier,
            ResultPoisoned: lambda e: self.poisoned.add(1),
            ResultDropped: lambda e: self.dropped.add(1),
            ResultsUnapplied: lambda e: self.unapplied.add(len(e.job_ids)),
            CompleterCrashed: lambda e: self.completer_crashes.add(1),
            JobReconciled: self._reconciled,
            JobCancelled: self._cancelled,
            JobsReleased: self._released,
        }

    def handlers(self) -> Handlers:
        return dict(self._handlers)

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    # zero series ----------------------------------------------------------------------
    def seed(
        self, queues: Iterable[str], kinds: Mapping[str, str], budget: int = n.SEED_BUDGET
    ) -> None:
        """Export every counter of a server at 0 for the label sets known now: a series
        born at 1 hides its first increase from Prometheus's increase() and rate().

        Seeds ``seed_pairs()``: what the server handles, within ``budget`` series of the
        widest counter (half the cardinality limit)."""
        for op in n.DB_OPERATIONS:
            self.db_errors.add(0, self._attr(n.OPERATION, op))
        for change in n.LEADER_CHANGES:
            self.leader_changes.add(0, self._attr(n.CHANGE, change))
        self.heartbeat_failures.add(0)
        self.fenced.add(0)
        for results in (self.poisoned, self.dropped, self.unapplied, self.completer_crashes):
            results.add(0)
        for queue in queues:
            self.stranded.add(0, self._attr(n.QUEUE, queue))
        for queue, kind in seed_pairs(queues, kinds, budget):
            for outcome in n.OUTCOMES:
                self._by_outcome(queue, kind, outcome)
            for outcome in RESCUE_OUTCOMES:
                self.rescued.add(0, self._by_outcome(queue, kind, outcome).attrs)
            self.stuck.add(0, self._by_kind(queue, kind).attrs)
            self.reconciled.add(0, self._by_kind(queue, kind).attrs)

    def _released(self, e: JobsReleased) -> None:
        if e.reason == "stranded":
            self.stranded.add(e.count, self._attr(n.QUEUE, e.queue))

    # attribute sets, built once ---------------------------------------------------------
    def _by_kind(self, queue: str, kind: str) -> _ByKind:
        key = (queue, kind)
        found = self._kinds.get(key)
        if found is None:
            found = self._kinds[key] = _ByKind(key, {n.QUEUE: queue, n.KIND: kind}, self)
            if self._counts is not None:
                self._counts.add_queue(queue)
        return found

    def _by_outcome(self, queue: str, kind: str, outcome: str) -> _ByOutcome:
        key = (queue, kind, outcome)
        found = self._outcomes.get(key)
        if found is None:
            found = self._outcomes[key] = _ByOutcome(key, self._by_kind(queue, kind), self)
        return found

    def _attr(self, name: str, value: str) -> Attrs:
        found = self._one.get((name, value))
        if found is None:
            found = self._one[(name, value)] = {name: value}
        return found

    # handlers: the first two run for every job ----------------------------------------
    def _claimed(self, e: JobClaimed) -> None:
        row = e.job
        s = self._kinds.get((row.queue, row.kind)) or self._by_kind(row.queue, row.kind)
        s.claimed[1] += 1
        if row.rate_key is not None:  # a claimed job starts at once (its slot is free)
            self.rate_keys.started(row.rate_key)
        if row.metadata and self._latency_traced:
            ids = producer_of(row)  # the claim wait links to the trace of the enqueue
            if ids is not None:
                self._latency_traced.recorder(s.key, s.attrs)(e.latency, *ids)
                return
        record = s.latency
        if record is None:
            record = s.latency = self.claim_latency.recorder(s.key, s.attrs)
        record(e.latency)

    def _finished(self, e: JobFinished) -> None:
        row, outcome = e.job, e.outcome
        s = (self._outcomes.get((row.queue, row.kind, outcome))
             or self._by_outcome(row.queue, row.kind, outcome.value))
        s.finished[1] += 1
        span_of, traced = self._attempt_span, self._duration_traced
        ids = span_of(row) if span_of is not None else None
        if ids is not None and traced is not None:
            traced.recorder(s.key, s.attrs)(e.duration, *ids)
        else:
            record = s.duration
            if record is None:
                record = s.duration = self.job_duration.recorder(s.key, s.attrs)
            record(e.duration)
        if outcome is Outcome.RETRY:
            s.by_kind.retried[1] += 1
        elif outcome is Outcome.HANDED_BACK:
            s.by_kind.handed_back[1] += 1

    def _claim_queried(self, e: ClaimQueried) -> None:
        record = self._claim_queries.get(e.queue)
        if record is None:
            attrs = self._attr(n.QUEUE, e.queue)
            record = self._claim_queries[e.queue] = self.claim_duration.recorder(
                (e.queue,), attrs)
        record(e.duration)
        if self._counts is not None:
            self._counts.poke()

    # the rest ---------------------------------------------------------------------------
    def _enqueued(self, e: JobsEnqueued) -> None:
        self.enqueued.add(e.count, self._by_kind(e.queue, e.kind).attrs)

    def _rescued(self, e: JobRescued) -> None:
        self.rescued.add(1, self._by_outcome(e.job.queue, e.job.kind, e.outcome.value).attrs)

    def _admitted(self, e: JobsAdmitted) -> None:
        s = self._by_kind(e.queue, e.kind)
        record = s.admission
        if record is None:
            record = s.admission = self.admission_delay.recorder(s.key, s.attrs)
        for delay in e.delays:
            record(delay)
        self.rate_keys.admitted(e.key, len(e.delays))

    def _store_failed(self, e: StoreFailed) -> None:
        self.db_errors.add(1, self._attr(n.OPERATION, e.operation))

    def _heartbeat(self, e: Heartbeat) -> None:
        if not e.ok:
            self.heartbeat_failures.add(1)
        elif self._source is not None:
            self._source.installation.poke()  # once: the id kiln_build_info carries
        if self._counts is not None:
            self._counts.poke()

    def _cancelled(self, e: JobCancelled) -> None:
        key = (e.job.queue, e.job.kind)
        record = self._cancels.get(key)
        if record is None:
            s = self._by_kind(*key)
            record = self._cancels[key] = self.cancel_latency.recorder(s.key, s.attrs)
        record(e.latency)

    def _reconciled(self, e: JobReconciled) -> None:
        self.reconciled.add(1, self._by_kind(e.queue, e.kind).attrs)

    def _leader(self, e: LeaderChanged) -> None:
        self.leader_changes.add(1, self._attr(n.CHANGE, "gained" if e.is_leader else "lost"))

    def _notifier(self, e: NotifierChanged) -> None:
        if self._source is not None:
            self._source.notifier_up = e.up
