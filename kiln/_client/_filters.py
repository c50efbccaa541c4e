"""Filters over jobs, as the admin calls, the CLI and the dashboard take them: each
field checked (states by name, whole ids, tags and JSON pairs by their rules) before
anything is read or written, and the audit record of an admin action over one.
"""

from __future__ import annotations

import builtins
import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Unpack

from kiln._errors import ValidationError
from kiln._model._job import JobFilter, JobState
from kiln._model._options import NoMoreKeys
from kiln._model._tags import check_pairs, check_tags


def filter_of(
    ids: Iterable[int] = (),
    state: JobState | str | Sequence[JobState | str] | None = None,
    queue: str | None = None,
    kind: str | None = None,
    error: str | None = None,
    last_error: str | None = None,
    max_id: int | None = None,
    min_id: int | None = None,
    finished_before: datetime | None = None,
    tags: Iterable[str] = (),
    metadata: Mapping[str, Any] | None = None,
    args: Mapping[str, Any] | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    **unknown: Unpack[NoMoreKeys],
) -> JobFilter:
    if unknown:  # only from untyped callers (a dict of a form's fields, say)
        raise ValidationError(
            f"unknown filter key(s): {', '.join(sorted(unknown))}; use {', '.join(FILTER_KEYS)}"
        )
    states: tuple[JobState, ...] = ()
    if state is not None:
        raw = [state] if isinstance(state, str | JobState) else list(state)
        try:
            states = tuple(JobState(s) for s in raw)
        except ValueError as exc:
            valid = ", ".join(s.value for s in JobState)
            raise ValidationError(f"unknown state in {raw!r}: use one of {valid}") from exc
    id_list = tuple(ids)
    if any(isinstance(i, bool) or not isinstance(i, int) for i in id_list):
        raise ValidationError(f"job ids must be whole numbers, got {list(id_list)!r}")
    id_list = tuple(int(i) for i in id_list)  # plain ints: EnqueueResults mixed in too
    for name, bound in (("max_id", max_id), ("min_id", min_id)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
            raise ValidationError(f"{name} must be a whole number, got {bound!r}")
    for name, when in (("finished_before", finished_before), ("created_after", created_after),
                       ("created_before", created_before)):
        if when is not None and when.tzinfo is None:
            raise ValidationError(f"{name} must be timezone-aware, got a naive datetime")
    if last_error is not None and not isinstance(last_error, str):
        raise ValidationError(f"last_error must be a text, got {last_error!r}")
    return JobFilter(states=states, queue=queue, kind=kind, error=error,
                     last_error=last_error, ids=id_list,
                     max_id=max_id, min_id=min_id, finished_before=finished_before,
                     created_after=created_after, created_before=created_before,
                     tags=check_tags(tags, "the tags filter") if tags else (),
                     metadata=check_pairs(metadata, "metadata") if metadata else {},
                     args=check_pairs(args, "args") if args else {})


FILTER_KEYS = ("ids", "state", "queue", "kind", "error", "last_error", "tags", "metadata",
               "args", "max_id", "min_id", "finished_before", "created_after", "created_before")


def audit_detail(f: JobFilter) -> dict[str, Any]:
    """What an audit entry of an admin action over ``f`` records of the filter."""
    detail = {k: val for k, val in dataclasses.asdict(f).items() if val not in ((), None, {})}
    detail["states"] = [s.value for s in f.states]
    detail["ids"] = builtins.list(f.ids)[:100]
    for name in ("finished_before", "created_after", "created_before"):
        when = getattr(f, name)
        if when is not None:
            detail[name] = when.isoformat()
    detail["at"] = time.time()
    return detail
