"""enqueue_chain and enqueue_fan_in: every step is checked before anything is written,
then all of them go in one transaction (or the caller's, with ``conn=``), on every
store; the App has sync and async twins of both."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

import kiln
from tests.plugins.databases import mysql_connect


@pytest.fixture
def app(store_url: str) -> Iterator[kiln.App]:
    app = kiln.App(store_url)

    @app.job("part")
    async def part(job: kiln.Job) -> None: ...

    @app.job("total", unique=kiln.Unique(by=("args.day",)))
    async def total(job: kiln.Job) -> None: ...

    app.migrate()
    try:
        yield app
    finally:
        app.close()


def count(app: kiln.App) -> int:
    return len(depends(app))


def depends(app: kiln.App) -> dict[int, list[int]]:
    """Every job's dependencies (a listing does not read them: a get per job)."""
    async def read() -> dict[int, list[int]]:
        client = app.client()
        try:
            rows = await client.list(kiln.filter_of(), limit=100)
            return {row.id: sorted(await _deps(client, row.id)) for row in rows}
        finally:
            await app.aclose()

    return app._portal.run(read())


async def _get(client: kiln.Client, job_id: int) -> kiln.JobRow:
    row = await client.get(job_id)
    assert row is not None
    return row


async def _deps(client: kiln.Client, job_id: int) -> list[int]:
    return list((await _get(client, job_id)).depends_on)


async def test_a_refused_step_is_refused_before_anything_is_written(app: kiln.App) -> None:
    """The final job is unique, and a unique job cannot depend on others: refused
    before the parts are written (they were committed, then the final refused)."""
    client = app.client()
    parts = [("part", {"n": 1}), ("part", {"n": 2})]
    with pytest.raises(kiln.ValidationError, match="'total' is unique"):
        await client.enqueue_fan_in(parts, then=("total", {"day": "mon"}))
    with pytest.raises(kiln.ValidationError, match="'total' is unique"):
        await client.enqueue_chain([("part", {"n": 3}), ("total", {"day": "tue"})])
    with pytest.raises(kiln.ValidationError, match="'total' is unique"):
        await app.aenqueue_chain([("part", {"n": 3}), ("total", {"day": "tue"})])
    with pytest.raises(kiln.ValidationError, match="args cannot be stored"):
        await client.enqueue_chain([("part", {"n": 3}), ("part", {"n": "\x00"})])
    assert await client.count(kiln.filter_of()) == 0
    await app.aclose()


def test_the_sync_twins_refuse_and_write_alike(app: kiln.App) -> None:
    with pytest.raises(kiln.ValidationError, match="'total' is unique"):
        app.enqueue_fan_in([("part", {"n": 1})], then=("total", {"day": "mon"}))
    assert count(app) == 0
    chain = app.enqueue_chain([("total", {"day": "mon"}), ("part", {"n": 1}), ("part", {"n": 2})])
    parts, final = app.enqueue_fan_in([("part", {"n": 3}), ("part", {"n": 4})], ("part", {}))
    assert depends(app) == {
        chain[0]: [], chain[1]: [chain[0]], chain[2]: [chain[1]],
        parts[0]: [], parts[1]: [], final: sorted(parts),
    }
    again = app.enqueue_chain([("total", {"day": "mon"}), ("part", {"n": 5})])  # a duplicate
    assert again[0] == chain[0] and not again[0].inserted
    assert depends(app)[again[1]] == [chain[0]]  # waits on the key's holder


async def test_the_async_forms_write_the_graph(app: kiln.App) -> None:
    client = app.client()
    first = await client.enqueue("part", {"n": 0})
    chain = await client.enqueue_chain([("part", {"n": 1}), ("part", {"n": 2})],
                                       depends_on=[first], priority=3)
    parts, final = await app.aenqueue_fan_in([("part", {"n": 3})], ("part", {}), priority=2)
    rows = {i: await _get(client, i) for i in (*chain, final)}
    assert rows[chain[0]].depends_on == [first]  # the first step keeps its depends_on
    assert rows[chain[1]].depends_on == [chain[0]]  # a later one: the step before only
    assert rows[final].depends_on == parts
    assert [rows[i].priority for i in (*chain, final)] == [3, 3, 2]
    await app.aclose()


def _caller(url: str) -> Any:
    """A caller's own connection, in a transaction (the driver's default but SQLite's)."""
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        conn = sqlite3.connect(url[len("sqlite:///"):], isolation_level=None)
        conn.execute("BEGIN")
        return conn
    if scheme.startswith("postgres"):
        return psycopg.connect(url)
    return mysql_connect(url, autocommit=False)


@pytest.mark.parametrize("commit", [True, False])
def test_the_graph_joins_the_callers_transaction(
    app: kiln.App, store_url: str, commit: bool
) -> None:
    conn = _caller(store_url)
    try:
        chain = app.enqueue_chain([("part", {"n": 1}), ("part", {"n": 2})], conn=conn)
        parts, final = app.enqueue_fan_in([("part", {"n": 3})], ("part", {}), conn=conn)
        assert count(app) == 0  # not before the caller commits
        conn.commit() if commit else conn.rollback()
    finally:
        conn.close()
    if not commit:
        assert count(app) == 0
        return
    assert depends(app) == {chain[0]: [], chain[1]: [chain[0]], parts[0]: [],
                            final: [parts[0]]}


async def test_hand_made_jobs_after_others_are_checked(app: kiln.App) -> None:
    client = app.client()
    bad: list[list[kiln.NewJob]] = [
        [kiln.NewJob("part", {}, after=(0,))],  # itself
        [kiln.NewJob("part", {}), kiln.NewJob("part", {}, after=(2,))],  # a later one
        [kiln.NewJob("part", {}), kiln.NewJob("part", {}, after=(True,))],
    ]
    for jobs in bad:
        with pytest.raises(kiln.ValidationError, match="only come after earlier jobs"):
            await client.enqueue_many(jobs)
    uniq = app.sync_client().build("total", {"day": "mon"})
    uniq.after = (0,)
    with pytest.raises(kiln.ValidationError, match="cannot have depends_on"):
        await client.enqueue_many([kiln.NewJob("part", {}), uniq])
    assert await client.count(kiln.filter_of()) == 0
    await app.aclose()
