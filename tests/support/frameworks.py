"""What the framework tests (tests/frameworks) share: SQLAlchemy URLs for the test databases,
and a count of jobs read under Django."""

from __future__ import annotations

import asyncio

from kiln._model._job import JobFilter
from kiln.stores import store_from_url

SYNC_DRIVER = {"sqlite": "sqlite", "postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}
ASYNC_DRIVER = {"postgresql": "postgresql+psycopg", "mysql": "mysql+asyncmy"}


def sa_url(store_url: str, driver: str) -> str:
    return driver + store_url[store_url.index(":"):]


def job_count(url: str, kind: str) -> int:
    async def count() -> int:
        store = store_from_url(url)
        await store.open()
        try:
            return await store.job_count(JobFilter(kind=kind))
        finally:
            await store.close()

    return asyncio.run(count())
