"""A job's timeline: enqueued, admitted, each attempt with its wait, run time and error,
and what comes next (the next attempt's due time, or how it ended).

Built from what the job row holds: its timestamps, and the record each failed attempt
left (when it was due and started, where the worker knew them; older records lack
them and show what they have). Pure: no I/O, so the page and ``/api/`` agree.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

from kiln._job import FINISHED_STATES, AttemptError, JobRow, JobState


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    event: str  # enqueued admitted attempt running next awaiting pending completed failed cancelled
    at: float | None  # unix seconds
    attempt: int | None = None
    waited: float | None = None  # seconds from due to start
    ran: float | None = None  # seconds from start to end (or to now, while running)
    error: str | None = None
    server_id: str | None = None
    due_in: float | None = None  # next: seconds until due (negative: overdue)

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _ts(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


def _span(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else max(end - start, 0.0)


def _failed_attempt(e: AttemptError) -> Step:
    return Step("attempt", e.started_at if e.started_at is not None else e.at,
                attempt=e.attempt, waited=_span(e.due_at, e.started_at),
                ran=_span(e.started_at, e.at), error=e.error, server_id=e.server_id)


def timeline(job: JobRow, now: float) -> list[Step]:
    steps = [Step("enqueued", _ts(job.created_at))]
    if job.admitted_at is not None:
        steps.append(Step("admitted", _ts(job.admitted_at),
                          waited=_span(_ts(job.created_at), _ts(job.admitted_at))))
    recorded = {e.attempt for e in job.errors}
    steps.extend(_failed_attempt(e) for e in job.errors)
    started, due = _ts(job.attempted_at), _ts(job.run_at)
    waited = _span(due, started)
    if job.state is JobState.RUNNING:
        steps.append(Step("running", started, attempt=job.attempt, waited=waited,
                          ran=_span(started, now), server_id=job.server_id))
    elif job.state in FINISHED_STATES:
        end = _ts(job.finished_at)
        if job.attempt and job.attempt not in recorded and started is not None:
            # the last attempt left no record: it completed (or was cancelled) cleanly
            steps.append(Step("attempt", started, attempt=job.attempt, waited=waited,
                              ran=_span(started, end), server_id=job.server_id))
        steps.append(Step(job.state.value, end))
    elif job.state in (JobState.AWAITING, JobState.PENDING):
        steps.append(Step(job.state.value, None, attempt=job.attempt + 1))  # no due time yet
    elif due is not None:
        steps.append(Step("next", due, attempt=job.attempt + 1, due_in=due - now))
    return steps
