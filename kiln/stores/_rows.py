"""Conversions shared by the stores: JSON columns, timestamps, first states.

Owns no SQL and no connections.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from kiln._model._job import AttemptError, EnqueueResult, JobResult, JobState, NewJob, Outcome
from kiln._model._json import encode

dumps = encode  # kiln's one encoder (json.dumps would build one per call)


# Set by every claim: a unique job whose states leave out running (Unique(states=
# Unique.WAITING): "one waiting and one running") gives up its key as it starts, for good,
# so its retry, rescue or hand-back never collides with the job that waits under its key
# (that would be a unique violation in the statement moving it back).
RAN_UNIQUE = "unique_states = CASE WHEN unique_states & 16 = 0 THEN 0 ELSE unique_states END"


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


# brief listings (Store.job_list(brief=True), the dashboard's lists): a JSON column whose
# text is over BRIEF_BYTES is not sent; the store's SQL sends CUT, its size in bytes, ":"
# and what stands in for it: null, or for errors the last attempt's record without its
# traceback. No JSON text starts with "#", so a value cannot be mistaken for the mark.
BRIEF_BYTES = 4096
BRIEF_COLUMNS = ("args", "params", "metadata", "errors")
CUT = "#kiln-cut:"


def brief_cols(columns: Sequence[str], expr: Callable[[str], str]) -> str:
    """A brief listing's select list: ``expr(column)`` (which ends ``AS column``) for
    the BRIEF_COLUMNS, the others as they are."""
    return ", ".join(expr(c) if c in BRIEF_COLUMNS else c for c in columns)


def uncut(row: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
    """A brief row's columns with the stand-ins of cut values, and the sizes cut."""
    out, cut = dict(row), {}
    for column in BRIEF_COLUMNS:
        value = out.get(column)
        if isinstance(value, bytes | bytearray):
            value = value.decode()
        if isinstance(value, str) and value.startswith(CUT):
            size, _, rest = value[len(CUT):].partition(":")
            out[column], cut[column] = rest, int(size)
    return out, cut


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


def claim_token(result: JobResult) -> datetime | None:
    """The claim time a result must still find on its row, or None: only results that
    give the attempt back carry it (the next claim of their job reuses the attempt's
    number, and so would match a copy of them written again late); others are fenced
    by the attempt number alone, which no later claim reuses."""
    return result.claimed_at if attempt_delta(result) else None


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


def levels(jobs: Sequence[NewJob]) -> list[list[int]]:
    """The positions of a batch in the order a store inserts them when some depend on
    earlier ones (``NewJob.after``): each level only on the levels before it."""
    level: list[int] = []
    for i, job in enumerate(jobs):
        if any(not 0 <= a < i for a in job.after):
            raise ValueError(f"job {i} of the batch must depend on earlier jobs only,"
                             f" not {list(job.after)}")
        level.append(1 + max((level[a] for a in job.after), default=-1))
    out: list[list[int]] = [[] for _ in range(max(level, default=-1) + 1)]
    for i, n in enumerate(level):
        out[n].append(i)
    return out


def resolved(job: NewJob, ids: Sequence[int]) -> NewJob:
    """``job`` with the ids of the batch's jobs it comes after among its dependencies."""
    if not job.after:
        return job
    return dataclasses.replace(
        job, depends_on=(*job.depends_on, *(int(ids[a]) for a in job.after)), after=()
    )
