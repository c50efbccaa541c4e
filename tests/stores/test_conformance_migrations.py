"""Conformance: migrations applied fresh, idempotent, concurrent; the schema check."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from kiln._errors import NotMigratedError
from kiln._model._job import JobFilter
from kiln.stores import Store, _migrations, store_from_url

# numbered the same in every dialect (checked below)
VERSIONS = [v for v, _sql in _migrations.load("kiln.stores.sqlite")]


@pytest.fixture
async def fresh(empty_store_url: str) -> AsyncIterator[Store]:
    s = store_from_url(empty_store_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_fresh_database_is_not_migrated(fresh: Store) -> None:
    with pytest.raises(NotMigratedError, match="kiln migrate"):
        await fresh.schema_check()
    with pytest.raises(NotMigratedError, match="kiln migrate"):
        await fresh.job_count(JobFilter())


async def test_migrate_fresh_then_idempotent(fresh: Store) -> None:
    assert await fresh.migrate() == VERSIONS
    assert await fresh.migrate() == []
    await fresh.schema_check()
    assert await fresh.job_count(JobFilter()) == 0


async def test_concurrent_migrations_apply_each_version_once(
    fresh: Store, empty_store_url: str
) -> None:
    others = [store_from_url(empty_store_url) for _ in range(2)]
    try:
        for s in others:
            await s.open()
        results = await asyncio.gather(fresh.migrate(), *(s.migrate() for s in others))
        assert sorted(results) == [[], [], VERSIONS]
    finally:
        for s in others:
            await s.close()
    await fresh.schema_check()


def test_migrations_are_numbered_the_same_in_every_dialect() -> None:
    for dialect in ("postgres", "mysql"):
        assert [v for v, _sql in _migrations.load(f"kiln.stores.{dialect}")] == VERSIONS
