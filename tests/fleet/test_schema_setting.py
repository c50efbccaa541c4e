"""``schema=`` (issue 41 item 2): kiln's tables and its notify channel in a schema of
their own, with no startup parameter, so several installations share one database
through a transaction-mode pooler without touching or waking each other.

(The whole conformance suite runs in this setting too: KILN_TEST_POSTGRES_VIA=schema,
or =pgbouncer through PgBouncer; see docs/testing.md.)
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest

import kiln
from kiln._model._job import NewJob
from kiln._model._wakeup import CHANNEL
from kiln.stores import Store, store_from_url
from kiln.stores.postgres._settings import Qualifier, settings
from tests.integration.inprocess import Running, config
from tests.plugins.databases import POSTGRES_URL
from tests.plugins.pgbouncer import PgBouncer
from tests.support.cli import ok, run_cli
from tests.support.flow import redis_url
from tests.support.waits import wait_for


def direct(database: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return POSTGRES_URL.rsplit("/", 1)[0] + f"/{database}" + (f"?{query}" if query else "")


def _tables(database: str, schema: str) -> set[str]:
    with psycopg.connect(direct(database)) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s",
                            (schema,)).fetchall()
    return {r[0] for r in rows}


@pytest.fixture
def schemas() -> Iterator[tuple[str, str]]:
    tag = uuid.uuid4().hex[:8]
    yield f"kiln_a_{tag}", f"kiln_b_{tag}"


def test_the_qualifier_names_tables_and_the_channel_only() -> None:
    q = Qualifier("billing")
    sql = ("WITH kiln_notify AS (SELECT pg_notify('kiln', 'q') FROM kiln_jobs j"
           " JOIN kiln_job_deps d ON d.job_id = j.id) SELECT to_regclass('kiln_jobs'),"
           " j.kiln_jobs_claim FROM kiln_jobs")
    assert q.qualify(sql) == (
        "WITH kiln_notify AS (SELECT pg_notify('kiln_billing', 'q') FROM billing.kiln_jobs j"
        " JOIN billing.kiln_job_deps d ON d.job_id = j.id) SELECT"
        " to_regclass('billing.kiln_jobs'), j.kiln_jobs_claim FROM billing.kiln_jobs"
    )
    assert settings("postgresql://h/db?schema=billing").channel == f"{CHANNEL}_billing"
    for bad in ("Billing", "1x", "a-b", "a;drop", "x" * 64):
        with pytest.raises(Exception, match="schema"):
            settings(f"postgresql://h/db?schema={bad}")


def test_every_migration_creates_its_tables_in_the_schema(pg_database: str) -> None:
    """`kiln migrate` with ?schema= (the CLI reads the URL as the app does): every
    table in the schema, none in public."""
    url = direct(pg_database, schema="kiln_cli")
    assert "applied migration" in ok(run_cli("--database-url", url, "migrate"))
    assert "up to date" in ok(run_cli("--database-url", url, "migrate"))
    from kiln.stores.postgres._settings import TABLES

    assert _tables(pg_database, "kiln_cli") == set(TABLES)
    assert _tables(pg_database, "public") == set()
    job_id = int(ok(run_cli("--database-url", url, "enqueue", "x")))
    assert f"{job_id}" in ok(run_cli("--database-url", url, "jobs", "list"))


async def _opened(url: str, **options: str | float) -> Store:
    store = store_from_url(url, **options)  # type: ignore[arg-type]
    await store.open()
    await store.migrate()
    return store


@pytest.fixture
async def two(
    pgbouncer: PgBouncer, pg_database: str, schemas: tuple[str, str]
) -> AsyncIterator[tuple[Store, Store]]:
    """Two installations of one database, through PgBouncer in transaction mode, each
    listening on a direct connection, each sending a NOTIFY with every insert (no notify
    limiter: the test counts one wake-up per insert)."""
    stores = [
        await _opened(pgbouncer.url(pg_database, pooler="transaction", schema=schema),
                      listen_url=direct(pg_database), notify_window=0)
        for schema in schemas
    ]
    try:
        yield stores[0], stores[1]
    finally:
        for store in stores:
            await store.close()


def _job(queue: str) -> NewJob:
    return NewJob(kind="k", args={}, queue=queue)


async def test_two_schemas_through_pgbouncer_keep_their_jobs_and_wake_only_their_own(
    two: tuple[Store, Store],
) -> None:
    a, b = two
    heard: dict[str, list[str]] = {"a": [], "b": []}
    await a.listen(lambda channel, payload: heard["a"].append(payload))
    await b.listen(lambda channel, payload: heard["b"].append(payload))
    for _ in range(5):
        await a.job_insert_many([_job("mail")])
    await b.job_insert_many([_job("sms")])
    await wait_for(lambda: (heard["a"].count("mail") == 5 and heard["b"] == ["sms"]) or None,
                   10, "each installation's own wake-ups")
    await asyncio.sleep(0.3)  # anything still in flight would arrive by now
    assert heard == {"a": ["mail"] * 5, "b": ["sms"]}  # 0 wake-ups across installations
    assert {c.queue: c.count for c in await a.job_counts()} == {"mail": 5}
    assert {c.queue: c.count for c in await b.job_counts()} == {"sms": 1}
    claimed = await b.job_claim("mail", ["k"], 10, "srv")
    assert claimed == []  # b never sees a's jobs
    # the leader's rollup and the charts' read name the schema's tables too (a fresh
    # database: unqualified, they would find no table at all)
    for store in (a, b):
        await store.timings_roll()
        assert await store.job_timings(3600.0, 60.0, "queue") == []


@pytest.mark.parametrize("listen", ["listen_url", "bus"])
async def test_two_installations_servers_through_pgbouncer_never_wake_each_other(
    pgbouncer: PgBouncer, pg_database: str, schemas: tuple[str, str], listen: str,
) -> None:
    """Two Apps, one per schema of one database, each with a server through PgBouncer
    in transaction mode, hearing wake-ups on a direct LISTEN (``listen_url``) or on a
    Redis Bus of the installation's own channel. Polls are 60 s apart, so every claim
    query after start is a wake-up: A's enqueues wake A's server only (B counts 0)."""
    tag = uuid.uuid4().hex[:8]

    def app_of(schema: str) -> kiln.App:
        url = pgbouncer.url(pg_database, pooler="transaction", schema=schema)
        if listen == "listen_url":
            return kiln.App(url, max_conns=2, listen_url=direct(pg_database))
        return kiln.App(url, max_conns=2, bus=kiln.RedisBus(redis_url(), f"kiln-{schema}-{tag}"))

    apps = [app_of(schema) for schema in schemas]
    done: list[int] = []
    for app in apps:
        @app.job("k")
        async def k(job: kiln.Job) -> None:
            done.append(job.id)

        await app.amigrate()
    runs = [await Running(app.server({"default": 2}, config(poll_interval=60))).started()
            for app in apps]
    try:
        await wait_for(lambda: all(r.server.stats().notifications for r in runs) or None, 10,
                       "the servers to hear their wake-ups")
        await asyncio.sleep(0.3)  # the claims of the start are done
        before = [len(run.of(kiln.events.ClaimQueried)) for run in runs]
        ids = [await apps[0].aenqueue("k", {}) for _ in range(5)]
        await wait_for(lambda: set(ids) <= set(done) or None, 10, "A's jobs to run on A")
        await asyncio.sleep(0.3)  # a wake-up crossing over would arrive by now
        woken = [len(run.of(kiln.events.ClaimQueried)) - b
                 for run, b in zip(runs, before, strict=True)]
        assert woken[0] >= 1 and woken[1] == 0, woken
        assert {e.job.id for e in runs[0].finished()} == set(ids)
        assert runs[1].finished() == []
    finally:
        for run in runs:
            await run.stop()
        for app in apps:
            await app.aclose()
            if isinstance(app.bus, kiln.RedisBus):
                await app.bus.close()
