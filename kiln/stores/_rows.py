"""Conversions shared by the stores: JSON columns, timestamps, first states.

Owns no SQL and no connections.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from kiln._job import AttemptError, EnqueueResult, JobResult, JobState, NewJob, Outcome

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    return _ENCODER.encode(value)  # one encoder: json.dumps builds one per call


def args_text(job: NewJob) -> str:
    """The job's args as JSON text: encoded once at enqueue (``args_json``) or now."""
    text = job.args_json
    return dumps(job.args) if text is None else text


def loads(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str | bytes | bytearray):
        return json.loads(value)
    return value  # drivers that decode JSON themselves


def ts(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def ts_required(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


def epoch(value: datetime) -> float:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def errors_from(value: Any) -> list[AttemptError]:
    return [AttemptError.from_json(item) for item in (loads(value) or [])]


def first_state(job: NewJob, run_at: float, now: float, deps_unmet: bool) -> JobState:
    """The state a new (or released) job starts in."""
    if deps_unmet:
        return JobState.AWAITING
    if job.rate_key is not None:
        return JobState.PENDING
    if run_at > now:
        return JobState.SCHEDULED
    return JobState.AVAILABLE


def run_at_of(job: NewJob, now: float) -> float:
    if job.run_at is not None:
        return epoch(job.run_at)
    return now + max(job.delay, 0.0)


def unique_key_at(job: NewJob, now: float) -> str | None:
    """The stored unique key: the job's, plus the bucket of ``now`` for a period."""
    if job.unique_key is None or job.unique_period is None:
        return job.unique_key
    return f"{job.unique_key}@{math.floor(now / job.unique_period)}"


def next_state(result: JobResult) -> JobState:
    """The state a result moves a running job to (delay 0 retries go straight back)."""
    outcome = result.outcome
    if outcome is Outcome.COMPLETED:
        return JobState.COMPLETED
    if outcome is Outcome.FAILED:
        return JobState.FAILED
    if outcome is Outcome.CANCELLED:
        return JobState.CANCELLED
    if outcome is Outcome.HANDED_BACK:
        return JobState.AVAILABLE
    return JobState.SCHEDULED if result.run_at_delay > 0 else JobState.AVAILABLE


def attempt_delta(result: JobResult) -> int:
    """Snoozes and hand-backs give the attempt back."""
    return -1 if result.outcome in (Outcome.SNOOZED, Outcome.HANDED_BACK) else 0


def readmitted(result: JobResult) -> bool:
    """Whether a rate-limited job goes back to ``pending`` (through admission) rather
    than straight to scheduled or available: every result after which the job runs
    again (a retry, a rescue, a snooze, a hand-back) makes it claimable again, and the
    operator's guide bounds every time a key's jobs are made claimable, so each such
    start is admitted like the first."""
    return result.outcome in (Outcome.RETRY, Outcome.SNOOZED, Outcome.HANDED_BACK)


RESCUE_ADD, RESCUE_KEEP, RESCUE_RESET = 1, 0, -1


def rescue_step(result: JobResult) -> int:
    """How a result moves the job's rescue counter (the rescues since its last real
    result): a rescue adds one; a hand-back (shutdown, claim-ahead, fencing) keeps it,
    since its attempt never ended and so says nothing about a crash loop; any other
    result ends a real attempt and resets it."""
    if result.rescued:
        return RESCUE_ADD
    if result.outcome is Outcome.HANDED_BACK:
        return RESCUE_KEEP
    return RESCUE_RESET


@dataclasses.dataclass(frozen=True, slots=True)
class UniqueSplit:
    """A batch's jobs by how a store inserts them: plain ones, the first job of each
    unique key, and later jobs of a key already in the batch (position -> the first's)."""

    plain: list[int]
    unique: list[int]
    repeats: dict[int, int]

    @classmethod
    def of(cls, jobs: Sequence[NewJob]) -> UniqueSplit:
        plain: list[int] = []
        unique: list[int] = []
        repeats: dict[int, int] = {}
        first: dict[str, int] = {}
        for i, job in enumerate(jobs):
            if job.unique_key is None:
                plain.append(i)
            elif job.unique_key in first:
                repeats[i] = first[job.unique_key]
            else:
                first[job.unique_key] = i
                unique.append(i)
        return cls(plain, unique, repeats)

    def merge(self, plain_ids: Sequence[int], unique: Sequence[EnqueueResult]) -> list[int]:
        """Ids in input order: plain ints, and EnqueueResults for unique jobs."""
        out: list[int] = [0] * (len(self.plain) + len(self.unique) + len(self.repeats))
        for i, job_id in zip(self.plain, plain_ids, strict=True):
            out[i] = job_id
        for i, result in zip(self.unique, unique, strict=True):
            out[i] = result
        for i, of in self.repeats.items():
            out[i] = EnqueueResult(out[of], False)
        return out
