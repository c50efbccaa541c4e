"""Spans: a producer span per enqueued job and a consumer span per attempt.

Owns the enqueue hook (``send {queue}``, PRODUCER), which injects the W3C context
(``traceparent``/``tracestate``, through the globally configured propagator) into the
job's metadata, and the execution middleware plus JobFinished subscriber that make
the ``process {queue}`` CONSUMER span of each attempt: started around the handler
(so the handler's own spans are its children, in sync handlers too, since the
executor copies the context into the thread), ended when the executor reports the
attempt's outcome. The consumer span links to the producer context by default, as
the messaging conventions advise, and is then always the root of a trace of its own
(never a child of whatever context the server runs in); ``trace_parent="parent"``
makes it a child of the producer instead. A failed attempt carries ``error.type``.
Where the tracer allows it, the span is an ``AttemptSpan`` (``_attempt_spans``), which
becomes an SDK span only when something other than a plain completion needs one.

An insert of several jobs at once (``enqueue_many``) is one ``send {queue}`` span with
``messaging.batch.message_count`` and the jobs' ids, as the conventions describe a
batch; its context is stored in every job, so each consumer span links to it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer

from kiln import Job, JobRow, NewJob, Outcome
from kiln.events import Event, Fenced, JobFinished
from kilnotel import _names as n
from kilnotel._attempt_spans import AttemptSpan, SpanFactory
from kilnotel._span_attributes import SpanAttributes

log = logging.getLogger("kilnotel.tracing")

TraceParent = Literal["link", "parent"]
BatchFinisher = Callable[[Sequence[int] | None, BaseException | None], None]
_ROOT = Context()  # an empty context: the span starts a trace of its own
Next = Callable[[], Awaitable[Any]]
Finisher = Callable[[int | None, BaseException | None], None]
_ERROR_OUTCOMES = frozenset({Outcome.RETRY, Outcome.FAILED})
_OUTCOME_EVENTS = {
    Outcome.RETRY: n.EVENT_RETRY,
    Outcome.SNOOZED: n.EVENT_SNOOZED,
    Outcome.HANDED_BACK: n.EVENT_HANDED_BACK,
}


class EnqueueHook:
    """A Client enqueue hook: ``hook(job)`` for one job, ``hook.batch(jobs)`` for many."""

    __slots__ = ("_tracing",)
    keeps_args = True  # it writes the trace context into metadata only

    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    def __call__(self, job: NewJob) -> Finisher | None:
        return self._tracing.enqueue_hook(job)

    def batch(self, jobs: Sequence[NewJob]) -> BatchFinisher | None:
        return self._tracing.batch(jobs)


class Tracing:
    def __init__(self, tracer: Tracer, trace_parent: TraceParent = "link") -> None:
        if trace_parent not in ("link", "parent"):
            raise ValueError(f"trace_parent must be 'link' or 'parent', got {trace_parent!r}")
        self._tracer = tracer
        self._parent = trace_parent == "parent"
        self._open: dict[tuple[int, int], Span] = {}
        self._names: dict[str, str] = {}  # queue -> "process {queue}"
        self._attrs: dict[tuple[str, str], dict[str, Any]] = {}  # (queue, kind) -> attrs
        # the metadata keys the global propagator reads: most jobs carry none of them
        # when nothing traced their enqueue, and extracting then is wasted work
        self._fields = frozenset(propagate.get_global_textmap().fields)
        self._attributes = SpanAttributes(tracer)
        self._factory = SpanFactory(tracer)  # attempt spans without the SDK's Span
        self.enabled = True

    # producer -----------------------------------------------------------------------
    def enqueue_hook(self, job: NewJob) -> Finisher | None:
        """Start ``send {queue}`` and store its context in the job's metadata."""
        if not self.enabled:
            return None
        try:
            return self._send(job)
        except Exception:  # tracing must never stop a job from being enqueued
            log.warning("kilnotel: could not trace an enqueue", exc_info=True)
            return None

    def _send(self, job: NewJob) -> Finisher:
        span = self._send_span([job])

        def finish(job_id: int | None, error: BaseException | None) -> None:
            try:
                _end_send(span, [job_id] if job_id is not None else None, error)
            except Exception:
                log.warning("kilnotel: could not end a send span", exc_info=True)

        return finish

    def hook(self) -> EnqueueHook:
        """The object to register as a Client's enqueue hook (one job or a batch)."""
        return EnqueueHook(self)

    def batch(self, jobs: Sequence[NewJob]) -> BatchFinisher | None:
        """The enqueue hook of an insert of several jobs: one ``send`` span for all."""
        if not self.enabled:
            return None
        try:
            span = self._send_span(jobs)
        except Exception:
            log.warning("kilnotel: could not trace an enqueue", exc_info=True)
            return None

        def finish(ids: Sequence[int] | None, error: BaseException | None) -> None:
            try:
                _end_send(span, ids, error)
            except Exception:
                log.warning("kilnotel: could not end a send span", exc_info=True)

        return finish

    def _send_span(self, jobs: Sequence[NewJob]) -> Span:
        queues = {job.queue for job in jobs}
        kinds = {job.kind for job in jobs}
        attributes: dict[str, Any] = {
            n.MESSAGING_SYSTEM: n.MESSAGING_SYSTEM_VALUE,
            n.MESSAGING_OPERATION_TYPE: "send",
            n.MESSAGING_OPERATION_NAME: "send",
        }
        # the conventions name the destination only when every message shares it
        if len(queues) == 1:
            attributes[n.MESSAGING_DESTINATION] = jobs[0].queue
        if len(kinds) == 1:
            attributes[n.KIND] = jobs[0].kind
        if len(jobs) > 1:
            attributes[n.MESSAGING_BATCH_COUNT] = len(jobs)
        name = n.SPAN_SEND.format(queue=jobs[0].queue) if len(queues) == 1 else "send"
        span = self._tracer.start_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        for job in jobs:
            job.metadata.update(carrier)
        return span

    # consumer -----------------------------------------------------------------------
    async def middleware(self, job: Job, call_next: Next) -> Any:
        """Wraps the handler: the attempt's span is current while it runs."""
        if not self.enabled:
            return await call_next()
        row = job.row
        try:
            span = self._start(row)
        except Exception:  # a broken tracer or processor must not fail the attempt
            log.warning("kilnotel: could not start a process span", exc_info=True)
            return await call_next()
        if type(span) is AttemptSpan or span.is_recording():  # unsampled: nothing to end
            self._open[(row.id, row.attempt)] = span
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return await call_next()
        finally:
            otel_context.detach(token)

    def _start(self, row: JobRow) -> Span:
        metadata = row.metadata
        producer = None
        links = None
        link = None
        if metadata and not self._fields.isdisjoint(metadata):
            producer = _extract(metadata)
            span_context = trace.get_current_span(producer).get_span_context()
            if span_context.is_valid:
                link = span_context
                if not self._parent:
                    links = [Link(span_context)]
        queue, kind = row.queue, row.kind
        name = self._names.get(queue) or self._name(queue)
        base = self._attrs.get((queue, kind)) or self._base(queue, kind)
        # link mode: a root, never a child of the context the server runs in
        context = producer if self._parent and producer is not None else _ROOT
        if self._factory.usable():
            parent = link if self._parent else None
            span: Span = self._factory.start(
                name, context, parent, None if self._parent else link,
                lambda: {**base, n.MESSAGING_MESSAGE_ID: str(row.id), n.SPAN_ATTEMPT: row.attempt})
        else:
            attributes = {**base, n.MESSAGING_MESSAGE_ID: str(row.id),
                          n.SPAN_ATTEMPT: row.attempt}
            # after sampling (see _span_attributes), an unsampled attempt builds none
            late = self._attributes.after_sampling
            span = self._tracer.start_span(
                name, context=context, kind=SpanKind.CONSUMER, links=links,
                attributes=None if late else attributes,
            )
            if late and span.is_recording():
                self._attributes.write(span, attributes)
        if row.rescues:
            # the previous attempt was lost with its server and rescued by the leader
            span.add_event(n.EVENT_RESCUED, {n.SPAN_RESCUES: row.rescues})
        return span

    def _name(self, queue: str) -> str:
        name = self._names[queue] = n.SPAN_PROCESS.format(queue=queue)
        return name

    def _base(self, queue: str, kind: str) -> dict[str, Any]:
        # built once per (queue, kind); each span gets a copy plus its id and attempt
        attrs = self._attrs[(queue, kind)] = {
            n.MESSAGING_SYSTEM: n.MESSAGING_SYSTEM_VALUE,
            n.MESSAGING_DESTINATION: queue,
            n.MESSAGING_OPERATION_TYPE: "process",
            n.MESSAGING_OPERATION_NAME: "process",
            n.KIND: kind,
        }
        return attrs

    def span_ids(self, row: JobRow) -> tuple[int, int] | None:
        """The ids of the open, sampled ``process`` span of this attempt (exemplars; as
        ints: the collector writes them as hex when /metrics is scraped)."""
        span = self._open.get((row.id, row.attempt))
        if span is None:
            return None
        context = span.get_span_context()
        if not context.trace_flags.sampled:
            return None
        return context.trace_id, context.span_id

    def handlers(self) -> dict[type[Event], Callable[[Any], None]]:
        """The events this tracer ends spans on, for observe()'s one subscriber."""
        return {JobFinished: self._finish, Fenced: self._fenced}

    def _fenced(self, e: Fenced) -> None:
        self._abandon(f"fenced: {e.reason}")

    def _finish(self, e: JobFinished) -> None:
        span: Span | None = self._open.pop((e.job.id, e.job.attempt), None)
        if span is None:
            return
        outcome = e.outcome
        name = _OUTCOME_EVENTS.get(outcome)
        if type(span) is AttemptSpan:
            if name is None and outcome not in _ERROR_OUTCOMES and span.end_untouched(
                    n.SPAN_OUTCOME, outcome.value):
                return  # completed, and nothing else touched the span: ended cheaply
            span = span.sdk()
            if span is None:
                return
        self._attributes.write(span, {n.SPAN_OUTCOME: outcome.value})
        if name is not None:
            attrs = {n.SPAN_RETRY_IN: e.retry_in} if e.retry_in is not None else None
            span.add_event(name, attrs)
        if outcome in _ERROR_OUTCOMES:
            error = e.error
            if error is not None:
                span.record_exception(error)
            span.set_attribute(n.ERROR_TYPE, _error_type(error, outcome.value))
            span.set_status(Status(StatusCode.ERROR, _describe(error, outcome.value)))
        span.end()

    def _abandon(self, reason: str) -> None:
        """A fenced server cancels its jobs without results: end their spans here."""
        spans, self._open = self._open, {}
        for open_span in spans.values():
            span = open_span.sdk() if type(open_span) is AttemptSpan else open_span
            if span is None:
                continue
            span.set_attribute(n.ERROR_TYPE, "fenced")
            span.set_status(Status(StatusCode.ERROR, reason))
            span.end()


def _error_type(error: BaseException | None, fallback: str) -> str:
    """The conventions' ``error.type``: the exception's fully qualified class name."""
    if error is None:
        return fallback
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(error: BaseException | None, fallback: str) -> str:
    return f"{type(error).__name__}: {error}" if error is not None else fallback


def _end_send(span: Span, ids: Sequence[int] | None, error: BaseException | None) -> None:
    if ids and len(ids) == 1:
        span.set_attribute(n.MESSAGING_MESSAGE_ID, str(ids[0]))
    elif ids:
        span.set_attribute(n.SPAN_JOB_IDS, [str(i) for i in ids[:n.SPAN_JOB_IDS_MAX]])
    if error is not None:
        span.record_exception(error)
        span.set_attribute(n.ERROR_TYPE, _error_type(error, "error"))
        span.set_status(Status(StatusCode.ERROR, _describe(error, "error")))
    span.end()


def _extract(metadata: dict[str, Any]) -> Context:
    try:
        return propagate.extract(metadata)
    except Exception:  # a user's own non-string "traceparent" must not break the job
        log.debug("kilnotel: unreadable trace context in job metadata", exc_info=True)
        return Context()
