"""KilnJobs: kiln.testing's functions bound to one App (the ``kiln_jobs`` fixture)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Unpack

from kiln._app import App
from kiln._events import EventHub
from kiln._model._job import JobRow
from kiln._model._options import EnqueueOptions
from kiln.testing import _assertions
from kiln.testing._assertions import State
from kiln.testing._drain import Drained, Names, adrain, drain
from kiln.testing._matching import _UNSET
from kiln.testing._perform import Performed, aperform, perform


class KilnJobs:
    """Assert on, drain and perform the jobs of ``app``; every method is the function of
    kiln.testing of the same name with the app given."""

    __test__ = False  # not a test class, whatever pytest's naming rules

    def __init__(self, app: App) -> None:
        self.app = app

    def enqueued_jobs(
        self, kind: str | None = None, *, args: Any = _UNSET, queue: str | None = None,
        priority: int | None = None, metadata: Any = _UNSET, state: State = None,
        tags: Sequence[str] | None = None, depends_on: Iterable[int] | None = None,
    ) -> list[JobRow]:
        return _assertions.enqueued_jobs(self.app, kind, args=args, queue=queue,
                                         priority=priority, metadata=metadata, state=state,
                                         tags=tags, depends_on=depends_on)

    def assert_enqueued(
        self, kind: str | None = None, *, args: Any = _UNSET, queue: str | None = None,
        priority: int | None = None, metadata: Any = _UNSET, state: State = None,
        count: int | None = None, tags: Sequence[str] | None = None,
        depends_on: Iterable[int] | None = None,
    ) -> list[JobRow]:
        __tracebackhide__ = True  # pytest shows the test's line, not this one
        return _assertions.assert_enqueued(self.app, kind, args=args, queue=queue,
                                           priority=priority, metadata=metadata, state=state,
                                           count=count, tags=tags, depends_on=depends_on)

    def refute_enqueued(
        self, kind: str | None = None, *, args: Any = _UNSET, queue: str | None = None,
        priority: int | None = None, metadata: Any = _UNSET, state: State = None,
        tags: Sequence[str] | None = None, depends_on: Iterable[int] | None = None,
    ) -> None:
        __tracebackhide__ = True
        _assertions.refute_enqueued(self.app, kind, args=args, queue=queue, priority=priority,
                                    metadata=metadata, state=state, tags=tags,
                                    depends_on=depends_on)

    def drain(
        self, kinds: Names = None, max_jobs: int | None = None, *, queues: Names = None,
        with_scheduled: bool = False, raise_errors: bool = False,
        events: EventHub | None = None, lift_rate_limits: bool = False,
    ) -> Drained:
        return drain(self.app, kinds, max_jobs, queues=queues, with_scheduled=with_scheduled,
                     raise_errors=raise_errors, events=events,
                     lift_rate_limits=lift_rate_limits)

    async def adrain(
        self, kinds: Names = None, max_jobs: int | None = None, *, queues: Names = None,
        with_scheduled: bool = False, raise_errors: bool = False,
        events: EventHub | None = None, lift_rate_limits: bool = False,
    ) -> Drained:
        return await adrain(self.app, kinds, max_jobs, queues=queues,
                            with_scheduled=with_scheduled, raise_errors=raise_errors,
                            events=events, lift_rate_limits=lift_rate_limits)

    def perform(
        self, kind: str, args: Any = None, *, params: dict[str, Any] | None = None,
        attempt: int = 1, raise_errors: bool = True,
        dependency_results: Mapping[int, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Performed:
        return perform(self.app, kind, args, params=params, attempt=attempt,
                       raise_errors=raise_errors, dependency_results=dependency_results,
                       **options)

    async def aperform(
        self, kind: str, args: Any = None, *, params: dict[str, Any] | None = None,
        attempt: int = 1, raise_errors: bool = True,
        dependency_results: Mapping[int, Any] | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Performed:
        return await aperform(self.app, kind, args, params=params, attempt=attempt,
                              raise_errors=raise_errors,
                              dependency_results=dependency_results, **options)

    def __repr__(self) -> str:
        return f"<KilnJobs of {self.app.url}>"
