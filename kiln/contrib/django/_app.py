"""A kiln.App on Django's database whose sync enqueue joins ``transaction.atomic()``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln._app import App as BaseApp
from kiln._job import EnqueueResult
from kiln.contrib.django._settings import database_url, kiln_settings


class App(BaseApp):
    """``kiln.App`` on ``KILN["DATABASE"]`` (or ``database``)'s connection settings."""

    def __init__(self, *, database: str | None = None, **options: Any) -> None:
        self.database = database or kiln_settings()["DATABASE"]
        super().__init__(database_url(self.database), **options)

    def _joined(self, conn: Any) -> Any:
        if conn is not None:
            return conn
        from django.db import connections

        django_conn = connections[self.database]
        # inside atomic(): the insert is part of the block and commits or rolls back
        # with it; outside, Django autocommits, and so does kiln's own connection
        return django_conn if django_conn.in_atomic_block else None

    def enqueue(
        self, kind: str, args: Any = None, *, conn: Any = None, **options: Any
    ) -> EnqueueResult:
        return super().enqueue(kind, args, conn=self._joined(conn), **options)

    def enqueue_many(
        self, jobs: Sequence[tuple[str, Any] | tuple[str, Any, dict[str, Any]]], *, conn: Any = None
    ) -> list[EnqueueResult]:
        return super().enqueue_many(jobs, conn=self._joined(conn))
