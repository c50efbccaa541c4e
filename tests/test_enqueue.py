"""Enqueue: options, validation of bad input (nothing written), transactional enqueue."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kiln
from kiln import JobFilter


def count_jobs(app: kiln.App) -> int:
    async def run() -> int:
        store = app.new_store()
        await store.open()
        try:
            return await store.job_count(JobFilter())
        finally:
            await store.close()

    return app._portal.run(run())


@pytest.fixture
def app(store_url: str) -> Iterator[kiln.App]:
    app = kiln.App(store_url)

    @app.job("email.send", queue="mail", max_attempts=12, backoff=kiln.Exponential(2, 120))
    async def send(job: kiln.Job) -> None:
        return None

    app.migrate()
    yield app
    app.close()


def test_enqueue_uses_the_kinds_options(app: kiln.App) -> None:
    job_id = app.enqueue("email.send", {"to": "a@example.com"}, delay=10, priority=3)
    job = app._portal.run(_get(app, job_id))
    assert job.queue == "mail" and job.max_attempts == 12 and job.priority == 3
    assert job.state is kiln.JobState.SCHEDULED
    assert job.args == {"to": "a@example.com"}
    assert (job.run_at - job.created_at).total_seconds() == pytest.approx(10, abs=0.5)


async def _get(app: kiln.App, job_id: int) -> kiln.JobRow:
    store = app.new_store()
    await store.open()
    try:
        row = await store.job_get(job_id)
        assert row is not None
        return row
    finally:
        await store.close()


async def test_aenqueue_and_many(app: kiln.App) -> None:
    one = await app.aenqueue("email.send", {"n": 1})
    many = await app.aenqueue_many([("email.send", {"n": i}) for i in range(50)])
    assert len(set(many)) == 50 and one not in many
    await app.aclose()


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("email.send", {"args": {"when": object()}}, "args must be JSON-serialisable"),
    ("email.send", {"args": {"x": float("nan")}}, "args must be JSON-serialisable"),
    ("", {}, "kind must be a non-empty string"),
    ("k" * 201, {}, "kind is 201 characters long; the limit is 200"),
    ("email.send", {"queue": ""}, "queue must be a non-empty string"),
    ("email.send", {"queue": "q" * 300}, "queue is 300 characters long"),
    ("email.send", {"delay": -1}, "delay must not be negative"),
    ("email.send", {"max_attempts": 0}, "max_attempts must be a whole number of at least 1"),
    ("email.send", {"timeout": 0}, "timeout must be a positive number of seconds"),
    ("email.send", {"colour": "red"}, "unknown enqueue option(s): colour"),
    ("no.such.kind", {}, "unknown job kind 'no.such.kind'"),
    ("email.send", {"depends_on": ["x"]}, "depends_on must hold job ids"),
]


@pytest.mark.parametrize(("kind", "options", "message"), BAD)
def test_bad_input_is_refused_and_nothing_is_written(
    app: kiln.App, kind: str, options: dict[str, Any], message: str
) -> None:
    options = dict(options)
    args = options.pop("args", {})
    with pytest.raises(kiln.ValidationError) as info:
        app.enqueue(kind, args, **options)
    assert message in str(info.value)
    assert count_jobs(app) == 0


def test_unknown_url_scheme() -> None:
    with pytest.raises(kiln.ConfigError, match="unknown scheme 'redis'"):
        kiln.App("redis://127.0.0.1/0")


def test_unreachable_database() -> None:
    with kiln.App("postgresql://postgres@127.0.0.1:1/test") as app, pytest.raises(
        kiln.UnreachableError, match=r"127\.0\.0\.1"
    ):
        app.enqueue("anything", {})


def test_not_migrated_database(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(kiln.NotMigratedError, match="kiln migrate"):
        app.enqueue("anything", {})


def test_not_migrated_postgres(empty_store_url: str) -> None:
    with kiln.App(empty_store_url) as app, pytest.raises(kiln.NotMigratedError,
                                                         match="kiln migrate"):
        app.enqueue("anything", {})  # a fresh, empty schema or file


def test_server_refuses_an_unmigrated_database(empty_store_url: str) -> None:
    app = kiln.App(empty_store_url)
    app.register("noop", lambda job: None)
    with pytest.raises(kiln.NotMigratedError, match="kiln migrate"):
        app.server({"default": 1}).run_sync()


# transactional enqueue ------------------------------------------------------------------
def test_sqlite_enqueue_joins_the_callers_transaction(tmp_path: Path) -> None:
    path = tmp_path / "tx.db"
    app = kiln.App(f"sqlite:///{path}")
    app.migrate()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.execute("BEGIN")
    conn.execute("INSERT INTO orders DEFAULT VALUES")
    app.enqueue("order.ship", {"order": 1}, conn=conn)
    conn.execute("ROLLBACK")
    assert count_jobs(app) == 0
    conn.execute("BEGIN")
    conn.execute("INSERT INTO orders DEFAULT VALUES")
    job_id = app.enqueue("order.ship", {"order": 2}, conn=conn)
    conn.execute("COMMIT")
    assert count_jobs(app) == 1
    assert app._portal.run(_get(app, job_id)).args == {"order": 2}
    conn.close()


def _pg(store_url: str) -> str:
    if not store_url.startswith("postgresql"):
        pytest.skip("this test joins a psycopg transaction: PostgreSQL only")
    return store_url


def test_postgres_enqueue_joins_a_sync_transaction(store_url: str) -> None:
    import psycopg

    url = _pg(store_url)
    app = kiln.App(url)
    app.migrate()
    with app, psycopg.connect(url) as conn:
        app.enqueue("order.ship", {"order": 1}, conn=conn)
        conn.rollback()
        assert count_jobs(app) == 0
        app.enqueue("order.ship", {"order": 2}, conn=conn)
        assert count_jobs(app) == 0, "not visible before the caller commits"
        conn.commit()
    assert count_jobs(app) == 1


async def test_postgres_enqueue_joins_an_async_transaction(store_url: str) -> None:
    import psycopg

    url = _pg(store_url)
    app = kiln.App(url)
    await app.amigrate()
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await app.aenqueue("order.ship", {"order": 1}, conn=conn)
        await conn.rollback()
        await app.aenqueue("order.ship", {"order": 2}, conn=conn)
        await conn.commit()
    assert await app.client()._store.job_count(JobFilter()) == 1
    await app.aclose()
