"""What a cancel did: how many jobs it cancelled, and which named jobs it could not.

Owns ``CancelResult`` and the look-up behind it. A cancel in bulk reports finished
and unknown ids, never raises for them; ``Client.cancel_job`` refuses one of them with
an error, before writing anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kiln._errors import JobFinishedError, JobNotFoundError
from kiln._model._job import FINISHED_STATES, JobFilter, JobState
from kiln.stores import Store

LOOKUP_MAX = 1000  # named ids looked up before a cancel; past that, none are reported


class CancelResult(int):
    """How many jobs a cancel cancelled (an ``int``, as before), and of the ids it named:
    ``finished`` (id -> state: completed, failed or cancelled before) and ``missing``
    (no such job). Running jobs among the cancelled ones are stopped on their servers."""

    finished: Mapping[int, JobState]
    missing: tuple[int, ...]

    def __new__(
        cls, count: int, finished: Mapping[int, JobState] | None = None,
        missing: Sequence[int] = (),
    ) -> CancelResult:
        result = super().__new__(cls, count)
        result.finished = dict(finished or {})
        result.missing = tuple(missing)
        return result

    def __repr__(self) -> str:
        return (f"CancelResult({int(self)}, finished={dict(self.finished)!r},"
                f" missing={self.missing!r})")

    def __str__(self) -> str:
        return int.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (CancelResult, (int(self), dict(self.finished), self.missing))


async def not_cancellable(
    store: Store, f: JobFilter
) -> tuple[dict[int, JobState], tuple[int, ...]]:
    """Of the ids ``f`` names, those finished already and those that do not exist."""
    ids = sorted({int(i) for i in f.ids})
    if not ids or len(ids) > LOOKUP_MAX:
        return {}, ()
    rows = await store.job_list(JobFilter(ids=tuple(ids)), limit=len(ids))
    found = {r.id: r.state for r in rows}
    finished = {i: s for i, s in found.items() if s in FINISHED_STATES}
    return finished, tuple(i for i in ids if i not in found)


async def check_one(store: Store, job_id: int) -> None:
    """Raise unless job ``job_id`` exists and has not finished."""
    row = await store.job_get(job_id)
    if row is None:
        raise JobNotFoundError(job_id)
    if row.state in FINISHED_STATES:
        raise JobFinishedError(job_id, row.state.value)
