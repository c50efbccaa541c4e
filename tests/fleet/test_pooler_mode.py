"""kiln behind PgBouncer in transaction mode (issue 41): the pooler setting.

Every test starts its own PgBouncer (tests/plugins/pgbouncer.py) in front of a database
of its own, since PgBouncer refuses the suite's ``options=-csearch_path`` URLs.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

import kiln
from kiln._errors import ConfigError, StoreError
from kiln.stores import store_from_url
from kiln.stores.postgres import PostgresStore
from kiln.stores.postgres._settings import settings
from tests.integration.inprocess import Running, config
from tests.plugins.databases import POSTGRES_URL
from tests.plugins.pgbouncer import PgBouncer
from tests.support.waits import wait_for


def direct(database: str) -> str:
    return POSTGRES_URL.rsplit("/", 1)[0] + f"/{database}"


def test_url_parameters_are_kiln_s_and_never_reach_libpq() -> None:
    s = settings("postgresql://u@h:6432/db?pooler=transaction&sslmode=disable"
                 "&listen_url=postgresql%3A%2F%2Fu%40h%3A5432%2Fdb")
    assert s.conninfo == "postgresql://u@h:6432/db?sslmode=disable"
    assert s.pooler == "transaction" and not s.prepared
    assert s.listen_conninfo == "postgresql://u@h:5432/db"
    assert settings("postgresql://u@h/db").listen_conninfo == "postgresql://u@h/db"
    assert settings("postgresql://u@h/db?pooler=transaction").listen_conninfo is None
    with pytest.raises(ConfigError, match="statement mode"):
        settings("postgresql://u@h/db?pooler=statement")
    with pytest.raises(ConfigError, match="the URL says pooler=transaction"):
        settings("postgresql://u@h/db?pooler=transaction", pooler="session")
    store = store_from_url("postgresql://u@h/db", pooler="transaction")
    assert isinstance(store, PostgresStore)
    assert not store.capabilities.listen_notify  # nothing to listen on: it polls


async def _server_prepared(database: str) -> int:
    async with await psycopg.AsyncConnection.connect(direct(database)) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM pg_prepared_statements ps, pg_stat_activity a"
            " WHERE a.datname = %s AND a.pid <> pg_backend_pid()", (database,))
        row = await cur.fetchone()
        assert row is not None
        return int(row[0])


async def test_transaction_mode_runs_jobs_with_nothing_prepared(
    pgbouncer: PgBouncer, pg_database: str
) -> None:
    """The issue's trial: a producer and a worker through PgBouncer in transaction mode.
    Before the fix the releaser failed with 'prepared statement "_pg3_9" requires 5'
    and jobs stalled; now every job runs and no server connection holds a prepared
    statement."""
    url = pgbouncer.url(pg_database, pooler="transaction")
    app = kiln.App(url, max_conns=2)
    done: list[int] = []

    @app.job("work")
    async def work(job: kiln.Job) -> None:
        done.append(job.args["n"])

    await app.amigrate()
    running = await Running(app.server({"default": 4}, config())).started()
    try:
        for n in range(60):  # more than psycopg's prepare_threshold (5) per statement
            await app.aenqueue("work", {"n": n})
        await app.aenqueue_many([("work", {"n": n}) for n in range(60, 200)])
        await app.aenqueue("work", {"n": 200}, delay=0.3)  # the releaser's statement
        await wait_for(lambda: len(done) == 201 or None, 30, "every job to run")
        assert sorted(done) == list(range(201))
        assert running.server.healthy(), running.server.healthy().reasons
        assert running.server.stats().store_errors == 0
    finally:
        await running.stop()
        await app.aclose()
    assert await _server_prepared(pg_database) == 0


async def test_listen_url_wakes_servers_behind_the_pooler(
    pgbouncer: PgBouncer, pg_database: str
) -> None:
    """Statements through the pooler, LISTEN on a direct URL: a job starts on its
    notification, not on the (here 30 s) poll."""
    url = pgbouncer.url(pg_database, pooler="transaction")
    app = kiln.App(url, max_conns=2, listen_url=direct(pg_database))

    @app.job("work")
    async def work(job: kiln.Job) -> None: ...

    await app.amigrate()
    running = await Running(app.server({"default": 1}, config(poll_interval=60))).started()
    try:
        assert running.server.stats().notifications
        job_id = await app.aenqueue("work", {})
        await wait_for(lambda: running.finished(job_id) or None, 10, "the job to run")
    finally:
        await running.stop()
        await app.aclose()


async def test_listen_through_a_transaction_pooler_is_refused_at_start(
    pgbouncer: PgBouncer, pg_database: str
) -> None:
    """Unset pooler behind a transaction-mode pooler (prepared statements on, LISTEN
    through it): the start fails within the probe's bound, saying why and what to set."""
    app = kiln.App(pgbouncer.url(pg_database), max_conns=2)

    @app.job("work")
    async def work(job: kiln.Job) -> None: ...

    await app.amigrate()
    server = app.server({"default": 1}, config())
    began = time.monotonic()
    with pytest.raises(StoreError, match=r"did not hear its own probe.*pooler=transaction"):
        await asyncio.wait_for(server.run(), 30)
    assert time.monotonic() - began < 15


async def test_listen_url_through_the_pooler_is_refused_too(
    pgbouncer: PgBouncer, pg_database: str
) -> None:
    store = PostgresStore(pgbouncer.url(pg_database), pooler="transaction",
                          listen_url=pgbouncer.url(pg_database), max_conns=1)
    await store.open()
    try:
        with pytest.raises(StoreError, match="did not hear its own probe"):
            await store.listen(lambda channel, payload: None)
    finally:
        await store.close()


@pytest.mark.slow
async def test_prepared_statements_behind_a_transaction_pooler_turn_health_red(
    pgbouncer: PgBouncer, pg_database: str
) -> None:
    """Unset pooler behind a transaction-mode pooler, with LISTEN on a direct URL (so the
    start-up probe passes): the prepared statements that PgBouncer hands to other
    clients fail, and within a bound (a few heartbeat intervals) ``healthy()`` is red
    with the operation and the setting to change; the producer's error says so too."""
    app = kiln.App(pgbouncer.url(pg_database), max_conns=2, listen_url=direct(pg_database))

    @app.job("work")
    async def work(job: kiln.Job) -> None: ...

    await app.amigrate()
    running = await Running(app.server(
        {"default": 4}, config(heartbeat_interval=1.0, dead_after=9.0, leader_ttl=3.0))).started()
    producer_errors: list[str] = []

    async def red() -> str | None:
        try:
            await app.aenqueue("work", {})
        except StoreError as exc:
            producer_errors.append(str(exc))
        reasons = running.server.healthy().reasons
        # the store's own reason; the results writer's ("results not written ... last
        # error ...") may name the setting too, before or after it
        return next((r for r in reasons if r.startswith("store operation ")
                     and "set pooler=transaction" in r.lower()), None)

    try:
        began = time.monotonic()
        reason = None
        while reason is None and time.monotonic() - began < 15:
            reason = await red()
            await asyncio.sleep(0.02)
        assert reason is not None, running.server.healthy().reasons
        assert time.monotonic() - began < 10  # two heartbeat intervals past the first errors
        assert "prepared statement" in reason
        assert not running.server.healthy()
        assert running.server.healthy().store_failing
    finally:
        await running.stop()
        await app.aclose()
    assert all("pooler=transaction" in e for e in producer_errors)


@pytest.mark.parametrize("error", [
    psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_0" already exists'),
    psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_3" does not exist'),
    psycopg.errors.ProtocolViolation('bind message supplies 0 parameters, but prepared'
                                     ' statement "_pg3_9" requires 5'),
])
def test_a_lost_prepared_statement_names_the_pooler_setting(error: Exception) -> None:
    from kiln.stores.postgres._errors import translate

    translated = translate("jobs_release_due", "postgresql://h:6432/db", error)
    assert type(translated) is StoreError  # not "unreachable": the server answered
    assert "set pooler=transaction" in str(translated).lower()
