"""A store opened for one thing and closed again, from plain test code: ``migrate``
(kiln.testing's own) and ``count_jobs``."""

from __future__ import annotations

from kiln import JobFilter
from kiln.stores import store_from_url
from kiln.testing._databases import _migrate as migrate  # kiln.testing's, one copy


async def count_jobs(url: str, jobs: JobFilter | None = None) -> int:
    """How many jobs the database at ``url`` holds (that match ``jobs``)."""
    store = store_from_url(url)
    await store.open()
    try:
        return await store.job_count(jobs or JobFilter())
    finally:
        await store.close()


__all__ = ["count_jobs", "migrate"]
