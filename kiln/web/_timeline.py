"""A job's timeline: enqueued, admitted, each attempt with its wait, run time and error,
each requeue and the runs after it, and what comes next (the next attempt's due time,
or how it ended).

Built from what the job row holds: its timestamps, and the record each failed attempt
left (when it was due and started, where the worker knew them; older records lack
them and show what they have). A requeue sets the attempt back to 0, so an attempt
number that does not grow marks one; the audit entries of the job that the caller
passes (``actions``: requeues with their actor and time) say who and when. Runs are
numbered across requeues (``run``), attempts as the job counts them. Pure: no I/O, so
the page and ``/api/`` agree.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from kiln._model._job import FINISHED_STATES, AttemptError, AuditEntry, JobRow, JobState

SKEW = 1.0  # seconds a worker's clock (records) may be behind the database's (starts)


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    event: str  # enqueued admitted attempt requeued running next awaiting pending + end states
    at: float | None  # unix seconds
    attempt: int | None = None
    waited: float | None = None  # seconds from due to start
    ran: float | None = None  # seconds from start to end (or to now, while running)
    error: str | None = None
    server_id: str | None = None
    due_in: float | None = None  # next: seconds until due (negative: overdue)
    run: int | None = None  # attempt steps: the run's number, counted across requeues
    actor: str | None = None  # requeued: who, when an audit entry says so

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(end - start, 0.0)


def _failed_attempt(e: AttemptError, run: int) -> Step:
    return Step("attempt", e.started_at if e.started_at is not None else e.at,
                attempt=e.attempt, waited=_span(e.due_at, e.started_at),
                ran=_span(e.started_at, e.at), error=e.error, server_id=e.server_id, run=run)


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """An audit entry about this job: what (``requeue``), when (unix seconds), who."""

    action: str
    at: float
    actor: str


def _requeued(actions: Sequence[Action], after: float | None, before: float | None,
              fallback: float | None) -> Step:
    """The requeue between two runs: the audit's requeue in that window if one is."""
    for a in actions:
        if a.action == "requeue" and (after is None or a.at >= after) \
                and (before is None or a.at <= before):
            return Step("requeued", a.at, actor=a.actor)
    return Step("requeued", fallback)


def _audited(steps: list[Step], actions: Sequence[Action]) -> list[Step]:
    """``steps`` with the audited requeues that no step shows yet (a completed job
    requeued leaves no record of the run before) put in by time."""
    shown = {(s.at, s.actor) for s in steps if s.event == "requeued"}
    for a in actions:
        if a.action != "requeue" or (a.at, a.actor) in shown:
            continue
        at = next((i for i, s in enumerate(steps) if i and s.at is not None and s.at > a.at),
                  len(steps))
        steps.insert(at, Step("requeued", a.at, actor=a.actor))
    return steps


def _unrecorded(job: JobRow, started: float | None) -> bool:
    """Whether the job's last attempt left no record of its own: a completion never
    does; a failure always does; a cancel of a running attempt does, and after a
    requeue its number can be one an earlier record has, so a record older than the
    attempt's start (by more than a clock's skew) is not its own."""
    if started is None:
        return False
    if job.state is JobState.COMPLETED:
        return True
    recorded = {e.attempt for e in job.errors}
    if job.state is JobState.FAILED:
        return job.attempt not in recorded
    last = job.errors[-1] if job.errors else None
    return job.attempt not in recorded or (
        last is not None and last.attempt == job.attempt and started > last.at + SKEW)


def timeline(job: JobRow, now: float, actions: Sequence[Action] = ()) -> list[Step]:
    steps = [Step("enqueued", _ts(job.created_at))]
    if job.admitted_at is not None:
        steps.append(Step("admitted", _ts(job.admitted_at),
                          waited=_span(_ts(job.created_at), _ts(job.admitted_at))))
    last_attempt, last_end, runs = 0, _ts(job.created_at), 0
    for e in job.errors:
        start = e.started_at if e.started_at is not None else e.at
        if e.attempt <= last_attempt:  # the count went back: requeued in between
            steps.append(_requeued(actions, last_end, start, None))
        runs += 1
        steps.append(_failed_attempt(e, runs))
        last_attempt, last_end = e.attempt, e.at
    started, due = _ts(job.attempted_at), _ts(job.run_at)
    waited = _span(due, started)
    new_run = _unrecorded(job, started)

    def requeue_before(next_attempt: int, until: float | None) -> None:
        if job.errors and next_attempt <= last_attempt:
            # a first attempt after a requeue is due when the requeue set it
            steps.append(_requeued(actions, last_end, until,
                                   due if next_attempt == 1 else None))

    if job.state is JobState.RUNNING:
        requeue_before(job.attempt, started)
        steps.append(Step("running", started, attempt=job.attempt, waited=waited,
                          ran=_span(started, now), server_id=job.server_id, run=runs + 1))
    elif job.state in FINISHED_STATES:
        end = _ts(job.finished_at)
        if job.attempt and new_run:
            # the last attempt left no record: it completed (or was cancelled) cleanly
            requeue_before(job.attempt, started)
            steps.append(Step("attempt", started, attempt=job.attempt, waited=waited,
                              ran=_span(started, end), server_id=job.server_id,
                              run=runs + 1))
        elif not job.attempt:  # requeued, then cancelled (or deleted) before it ran
            requeue_before(1, end)
        steps.append(Step(job.state.value, end))
    elif job.state in (JobState.AWAITING, JobState.PENDING):
        requeue_before(job.attempt + 1, None)
        steps.append(Step(job.state.value, None, attempt=job.attempt + 1))  # no due time yet
    elif due is not None:
        requeue_before(job.attempt + 1, None)  # audited just after it set the due time
        steps.append(Step("next", due, attempt=job.attempt + 1, due_in=due - now))
    return _audited(steps, actions)


RECENT_AUDIT = 200  # audit entries a job page looks through for its own requeues


def actions_of(entries: Sequence[AuditEntry], job_id: int) -> list[Action]:
    """The requeues among ``entries`` that name ``job_id`` among their ids (a bulk
    batch names its first 100), oldest first."""
    found = []
    for e in entries:
        ids = e.detail.get("ids") if isinstance(e.detail, dict) else None
        if e.action == "requeue" and e.count and isinstance(ids, list) and job_id in ids:
            found.append(Action(e.action, e.at.timestamp(), e.actor))
    return sorted(found, key=lambda a: a.at)
