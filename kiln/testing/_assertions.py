"""enqueued_jobs, assert_enqueued, refute_enqueued: what an app's database holds.

Reads through a store of the app's URL, opened for the call on kiln.testing's own
loop (so they work from sync and async tests alike); matching and messages are in
kiln.testing._matching.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from kiln._app import App
from kiln._model._job import JobFilter, JobRow, JobState
from kiln.stores import Store
from kiln.testing import _loop
from kiln.testing._matching import (
    _UNSET,
    Criteria,
    check_count,
    criteria,
    enqueued_message,
    matching,
    refuted_message,
)

State = JobState | str | Sequence[JobState | str] | None
PAGE = 1000


async def _all_jobs(app: App, want: Criteria | None = None) -> list[JobRow]:
    """Every job of the app's database, in id order (test databases are small). A
    listing leaves out what jobs depend on: when ``want`` asks about it, each job of the
    wanted kind is read whole."""
    store = app.new_store()
    await store.open()
    try:
        rows: list[JobRow] = []
        before: int | None = None
        while True:
            page = await store.job_list(JobFilter(), limit=PAGE, before_id=before)
            rows.extend(page)
            if len(page) < PAGE:
                break
            before = page[-1].id
        rows.reverse()
        if want is not None and want.depends_on is not None:
            rows = [await _whole(store, r) if want.kind in (None, r.kind) else r
                    for r in rows]
        return rows
    finally:
        await store.close()


async def _whole(store: Store, row: JobRow) -> JobRow:
    return await store.job_get(row.id) or row


def _want(kind: str | None, args: Any, queue: str | None, priority: int | None,
          metadata: Any, state: State, tags: Sequence[str] | None = None,
          depends_on: Iterable[int] | None = None) -> Criteria:
    return criteria(kind, args=args, queue=queue, priority=priority, metadata=metadata,
                    state=state, tags=tags, depends_on=depends_on)


def enqueued_jobs(
    app: App, kind: str | None = None, *, args: Any = _UNSET, queue: str | None = None,
    priority: int | None = None, metadata: Any = _UNSET, state: State = None,
    tags: Sequence[str] | None = None, depends_on: Iterable[int] | None = None,
) -> list[JobRow]:
    """The jobs that match, in id order; by default those waiting to run (awaiting,
    pending, scheduled, available). ``args``/``metadata`` match as a subset; a job
    matches ``tags`` when it has every one of them, ``depends_on`` when it depends on
    exactly those jobs."""
    want = _want(kind, args, queue, priority, metadata, state, tags, depends_on)
    return matching(_loop.run(_all_jobs(app, want)), want)


def assert_enqueued(
    app: App, kind: str | None = None, *, args: Any = _UNSET, queue: str | None = None,
    priority: int | None = None, metadata: Any = _UNSET, state: State = None,
    count: int | None = None, tags: Sequence[str] | None = None,
    depends_on: Iterable[int] | None = None,
) -> list[JobRow]:
    """Fail unless a matching job (exactly ``count`` of them, if given) is enqueued; the
    message shows what is enqueued instead. Returns the matching jobs."""
    __tracebackhide__ = True  # pytest shows the test's line, not this one
    want = _want(kind, args, queue, priority, metadata, state, tags, depends_on)
    check_count(count)
    rows = _loop.run(_all_jobs(app, want))
    found = matching(rows, want)
    if (count is None and not found) or (count is not None and len(found) != count):
        raise AssertionError(enqueued_message(want, count, found, rows))
    return found


def refute_enqueued(
    app: App, kind: str | None = None, *, args: Any = _UNSET, queue: str | None = None,
    priority: int | None = None, metadata: Any = _UNSET, state: State = None,
    tags: Sequence[str] | None = None, depends_on: Iterable[int] | None = None,
) -> None:
    """Fail if a matching job is enqueued; the message lists the ones found."""
    __tracebackhide__ = True
    want = _want(kind, args, queue, priority, metadata, state, tags, depends_on)
    found = matching(_loop.run(_all_jobs(app, want)), want)
    if found:
        raise AssertionError(refuted_message(want, found))
