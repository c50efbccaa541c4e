"""A kiln.App on Django's database whose sync enqueue joins ``transaction.atomic()``."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Unpack

from kiln._app import App as BaseApp
from kiln._client._client import ManyItem, Step
from kiln._model._job import EnqueueResult, JobRow
from kiln._model._kindref import KindRef
from kiln._model._kinds import Handler, Kind, make_kind
from kiln._model._options import EnqueueOptions, JobOptions
from kiln._server import Job
from kiln.contrib.django._settings import database_url, kiln_settings
from kiln.stores import StoreOptions


class App(BaseApp):
    """``kiln.App`` on ``KILN["DATABASE"]`` (or ``database``)'s connection settings."""

    def __init__(self, *, database: str | None = None,
                 **options: Unpack[StoreOptions]) -> None:
        self.database = database or kiln_settings()["DATABASE"]
        super().__init__(database_url(self.database), **options)

    def register(self, kind: str, handler: Handler, **options: Unpack[JobOptions]) -> Kind:
        """As ``kiln.App.register``; a sync handler (run on a thread of kiln's) closes the
        Django connections of its thread that are obsolete or broken, before and after,
        as Django does around each request: with the default ``CONN_MAX_AGE = 0`` each
        job opens and closes its own, none is left open when the thread ends."""
        if not make_kind(kind, handler, **options).is_async:
            handler = _closing_connections(handler)
        return super().register(kind, handler, **options)

    def get(self, job_id: int) -> JobRow | None:
        """The job ``job_id`` as the store holds it (with its result), from sync code."""
        return self._portal.run(self.sync_client().get(job_id))

    def _testing_database_url(self) -> str:
        """Where kiln's pytest plugin keeps this App under test: Django's database as it
        is now (a test runner may have renamed it to its test database), since an
        enqueue inside ``transaction.atomic()`` writes there whatever the App's URL."""
        return database_url(self.database)

    def _joined(self, conn: Any) -> Any:
        if conn is not None:
            return conn
        from django.db import connections

        django_conn = connections[self.database]
        # inside atomic(): the insert is part of the block and commits or rolls back
        # with it; outside, Django autocommits, and so does kiln's own connection
        return django_conn if django_conn.in_atomic_block else None

    def enqueue(
        self, kind: str | KindRef[Any], args: Any = None, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """As ``kiln.App.enqueue``; inside ``transaction.atomic()`` the insert joins it."""
        return super().enqueue(kind, args, conn=self._joined(conn), **options)

    def enqueue_many(
        self, jobs: Sequence[ManyItem], *, conn: Any = None
    ) -> list[EnqueueResult]:
        """As ``kiln.App.enqueue_many``; inside ``transaction.atomic()`` it joins it."""
        return super().enqueue_many(jobs, conn=self._joined(conn))

    def enqueue_chain(
        self, steps: Sequence[Step], *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """As ``kiln.App.enqueue_chain``; inside ``transaction.atomic()`` it joins it."""
        return super().enqueue_chain(steps, conn=self._joined(conn), **options)

    def enqueue_fan_in(
        self, parts: Sequence[Step], then: Step, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> tuple[list[EnqueueResult], EnqueueResult]:
        """As ``kiln.App.enqueue_fan_in``; inside ``transaction.atomic()`` it joins it."""
        return super().enqueue_fan_in(parts, then, conn=self._joined(conn), **options)


def _closing_connections(handler: Handler) -> Handler:
    @functools.wraps(handler)
    def run(job: Job) -> Any:
        from django.db import close_old_connections

        close_old_connections()
        try:
            return handler(job)
        finally:
            close_old_connections()

    return run
