"""PostgreSQL only: migration 0002 (has_dependents) on a database already in use.

Only the PostgreSQL store reads has_dependents (the others leave it unset), so only
there must a dependency recorded before version 2 still release its dependents.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from kiln.stores import _migrations, store_from_url
from tests.stores.factories import claim, complete, insert, job, state_of


@pytest.fixture
def pg_url(empty_store_url: str, backend: str) -> Iterator[str]:
    if backend != "postgresql":
        pytest.skip("postgres only: the other stores do not read has_dependents")
    yield empty_store_url


async def test_dependency_recorded_before_version_2_still_releases(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = _migrations.load
    monkeypatch.setattr(_migrations, "load", lambda package: every(package)[:1])
    store = store_from_url(pg_url)
    await store.open()
    try:
        assert await store.migrate() == [1]
        [a] = await insert(store, job())
        with psycopg.connect(pg_url, autocommit=True) as conn:  # a version-1 dependent
            c = conn.execute(
                "INSERT INTO kiln_jobs (queue, kind, state, args, run_at, max_attempts)"
                " VALUES ('q', 'c', 'awaiting', '{}', now(), 3) RETURNING id"
            ).fetchall()[0][0]
            conn.execute("INSERT INTO kiln_job_deps (job_id, dep_id) VALUES (%s, %s)", (c, a))
        monkeypatch.setattr(_migrations, "load", every)
        assert (await store.migrate())[0] == 2  # and whatever came after
        await store.schema_check()
        [row] = await claim(store)
        await complete(store, row)
        assert await state_of(store, c) == "available"
    finally:
        await store.close()
