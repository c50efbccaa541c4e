"""conn= takes a SQLAlchemy Session, AsyncSession, Connection or AsyncConnection.

Every path is run with commit and rollback on every database it supports: the job and
the business row written in the same transaction exist together or not at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import kiln
from kiln._model._job import JobFilter
from kiln.stores import Store
from tests.support.frameworks import ASYNC_DRIVER, SYNC_DRIVER, sa_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def app(store: Store, store_url: str) -> Iterator[kiln.App]:
    a = kiln.App(store_url)
    a.register("email.send", lambda job: None)
    yield a
    a.close()


@pytest.fixture
def engine(store: Store, store_url: str, backend: str) -> Iterator[sa.Engine]:
    e = sa.create_engine(sa_url(store_url, SYNC_DRIVER[backend]))
    with e.begin() as c:
        c.execute(sa.text("CREATE TABLE users (name VARCHAR(40))"))
    yield e
    e.dispose()


@pytest.fixture
async def aengine(store: Store, store_url: str, backend: str) -> AsyncIterator[AsyncEngine]:
    if backend not in ASYNC_DRIVER:
        pytest.skip(f"{backend}: aiosqlite's connection cannot be joined (its own thread)")
    e = create_async_engine(sa_url(store_url, ASYNC_DRIVER[backend]))
    async with e.begin() as c:
        await c.execute(sa.text("CREATE TABLE users (name VARCHAR(40))"))
    yield e
    await e.dispose()


async def counts(store: Store, engine: Any) -> tuple[int, int]:
    jobs = await store.job_count(JobFilter())
    if isinstance(engine, AsyncEngine):
        async with engine.connect() as c:
            users = (await c.execute(sa.text("SELECT COUNT(*) FROM users"))).scalar_one()
    else:
        with engine.connect() as c:
            users = c.execute(sa.text("SELECT COUNT(*) FROM users")).scalar_one()
    return jobs, users


INSERT = sa.text("INSERT INTO users (name) VALUES ('ada')")


@pytest.mark.parametrize("commit", [True, False])
async def test_session(app: kiln.App, engine: sa.Engine, store: Store, commit: bool) -> None:
    with Session(engine) as session:
        session.execute(INSERT)
        job_id = app.enqueue("email.send", {"to": "ada"}, conn=session)
        assert await store.job_count(JobFilter()) == 0  # not before the commit
        session.commit() if commit else session.rollback()
    assert await counts(store, engine) == ((1, 1) if commit else (0, 0))
    assert (await store.job_get(job_id) is not None) is commit


@pytest.mark.parametrize("commit", [True, False])
async def test_session_enqueue_first(
    app: kiln.App, engine: sa.Engine, store: Store, commit: bool
) -> None:
    """The enqueue may be the first statement: it begins the session's transaction."""
    with Session(engine) as session:
        app.enqueue_many([("email.send", {"to": "ada"}), ("email.send", {})], conn=session)
        session.execute(INSERT)
        session.commit() if commit else session.rollback()
    assert await counts(store, engine) == ((2, 1) if commit else (0, 0))


@pytest.mark.parametrize("commit", [True, False])
async def test_connection(app: kiln.App, engine: sa.Engine, store: Store, commit: bool) -> None:
    with engine.connect() as conn:
        app.enqueue("email.send", {"to": "ada"}, conn=conn)  # before any statement
        conn.execute(INSERT)
        conn.commit() if commit else conn.rollback()
    assert await counts(store, engine) == ((1, 1) if commit else (0, 0))


async def test_connection_in_engine_begin(app: kiln.App, engine: sa.Engine, store: Store) -> None:
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(INSERT)
        app.enqueue("email.send", {}, conn=conn)
        raise RuntimeError("the block fails: everything rolls back")
    assert await counts(store, engine) == (0, 0)
    with engine.begin() as conn:
        app.enqueue("email.send", {}, conn=conn)
    assert await counts(store, engine) == (1, 0)


@pytest.mark.parametrize("commit", [True, False])
async def test_sync_session_from_async_code(
    app: kiln.App, engine: sa.Engine, store: Store, commit: bool
) -> None:
    with Session(engine) as session:
        session.execute(INSERT)
        await app.aenqueue("email.send", {}, conn=session)
        session.commit() if commit else session.rollback()
    assert await counts(store, engine) == ((1, 1) if commit else (0, 0))


@pytest.mark.parametrize("commit", [True, False])
async def test_async_session(
    app: kiln.App, aengine: AsyncEngine, store: Store, commit: bool
) -> None:
    async with AsyncSession(aengine) as session:
        await session.execute(INSERT)
        await app.aenqueue("email.send", {"to": "ada"}, conn=session)
        assert await store.job_count(JobFilter()) == 0
        await (session.commit() if commit else session.rollback())
    assert await counts(store, aengine) == ((1, 1) if commit else (0, 0))


@pytest.mark.parametrize("commit", [True, False])
async def test_async_connection(
    app: kiln.App, aengine: AsyncEngine, store: Store, commit: bool
) -> None:
    async with aengine.connect() as conn:
        await app.aenqueue_many([("email.send", {}), ("email.send", {})], conn=conn)
        await conn.execute(INSERT)
        await (conn.commit() if commit else conn.rollback())
    assert await counts(store, aengine) == ((2, 1) if commit else (0, 0))


async def test_an_async_session_needs_aenqueue(app: kiln.App, aengine: AsyncEngine) -> None:
    async with AsyncSession(aengine) as session:
        with pytest.raises(TypeError, match="aenqueue"):
            app.enqueue("email.send", {}, conn=session)
