"""MySQLStore only: the lent pool, configuration errors, error translation, the sync
path without a connection, and admission reading the clock after the key's lock.

Behaviour shared with the other stores is in the conformance suite.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit

import asyncmy
import pymysql
import pytest

from kiln._errors import ConfigError, NotMigratedError, StoreError, UnreachableError
from kiln._model._job import JobFilter, RateLimit
from kiln.stores import store_from_url
from kiln.stores.mysql import MySQLStore
from kiln.stores.mysql._errors import translate
from tests.stores.factories import claim, job, result, state_of
from tests.support.config import fast_config


def args_of(url: str) -> dict[str, Any]:
    p = urlsplit(url)
    return {"host": p.hostname, "port": p.port or 3306, "user": p.username or "root",
            "password": p.password or "", "db": p.path.lstrip("/")}


async def migrated(url: str, **options: Any) -> MySQLStore:
    store = MySQLStore(url, **options)
    await store.open()
    await store.migrate()
    return store


def test_the_factory_builds_it_for_mysql_and_mariadb_urls() -> None:
    for scheme in ("mysql", "mariadb", "mysql+asyncmy"):
        assert isinstance(store_from_url(f"{scheme}://root@127.0.0.1/db"), MySQLStore)


def test_configuration_errors_name_the_field() -> None:
    class TinyPool:
        maxsize = 1

    with pytest.raises(ConfigError, match=r"pool.*maxsize >= 2"):
        MySQLStore("mysql://root@127.0.0.1/db", pool=TinyPool())
    with pytest.raises(ConfigError, match="max_conns"):
        MySQLStore("mysql://root@127.0.0.1/db", max_conns=1)
    with pytest.raises(ConfigError, match="names its database"):
        MySQLStore("mysql://root@127.0.0.1/")


async def test_a_lent_pool_is_used_and_left_as_it_was(mysql_url: str) -> None:
    pool = await asyncmy.create_pool(minsize=1, maxsize=2, autocommit=False, **args_of(mysql_url))
    try:
        store = await migrated(mysql_url, pool=pool)
        [job_id] = await store.job_insert_many([job()])
        assert [r.id for r in await claim(store)] == [job_id]
        assert await store.job_count(JobFilter()) == 1  # a read on the pool's other connection
        await store.close()
        assert pool.size >= 1  # the store closed nothing of the application's pool
        async with pool.acquire() as conn:  # the kept connection got its settings back
            assert conn.get_autocommit() is False
            async with conn.cursor() as cur:
                await cur.execute("SELECT COUNT(*) FROM kiln_jobs WHERE state = 'running'")
                assert (await cur.fetchone())[0] == 1
            await conn.rollback()
    finally:
        pool.close()
        await pool.wait_closed()


async def test_stores_on_one_lent_pool_share_the_kept_connection(mysql_url: str) -> None:
    """An App makes a store per loop and per server from the same options: on a pool
    of two they must not each keep a connection, or reads would wait forever."""
    pool = await asyncmy.create_pool(minsize=1, maxsize=2, autocommit=True, **args_of(mysql_url))
    try:
        stores = [await migrated(mysql_url, pool=pool) for _ in range(3)]
        await asyncio.wait_for(asyncio.gather(*(
            s.job_insert_many([job()]) for s in stores for _ in range(5)
        )), 10)
        counts = await asyncio.wait_for(
            asyncio.gather(*(s.job_count(JobFilter()) for s in stores)), 10
        )
        assert counts == [15, 15, 15]
        await stores[0].close()
        assert len(await asyncio.wait_for(claim(stores[1], limit=20), 10)) == 15
        for s in stores[1:]:
            await s.close()
        assert pool.size >= 1 and pool.freesize == pool.size  # every connection is back
    finally:
        pool.close()
        await pool.wait_closed()


async def test_unreachable_names_host_and_port() -> None:
    store = MySQLStore("mysql://root@127.0.0.1:1/test?connect_timeout=1")
    with pytest.raises(UnreachableError, match=r"127\.0\.0\.1:1/test"):
        await store.open()
    with pytest.raises(UnreachableError, match=r"127\.0\.0\.1:1/test"):
        await asyncio.to_thread(store.job_insert_many_sync, [job()])
    await store.close()


async def test_a_missing_schema_says_run_kiln_migrate(mysql_url: str) -> None:
    store = MySQLStore(mysql_url)
    try:
        with pytest.raises(NotMigratedError, match="kiln migrate"):
            await store.schema_check()
        with pytest.raises(NotMigratedError, match="kiln migrate") as caught:
            await store.job_get(1)
        assert caught.value.operation == "job_get" and caught.value.__cause__ is not None
        with pytest.raises(NotMigratedError, match="kiln migrate"):
            await asyncio.to_thread(store.job_insert_many_sync, [job()])
    finally:
        await store.close()


def test_translation_keeps_the_password_out() -> None:
    err = translate("job_claim", "db.example:3307/app", pymysql.err.OperationalError(
        2003, "Can't connect to MySQL server on 'db.example'"))
    assert isinstance(err, UnreachableError) and "db.example:3307/app" in str(err)
    other = translate("job_claim", "h:1/d", pymysql.err.IntegrityError(1062, "Duplicate"))
    assert type(other) is StoreError and other.operation == "job_claim"
    assert "secret" not in str(MySQLStore("mysql://u:secret@h/d")._where)


async def test_sync_insert_without_a_connection_commits_at_once(mysql_url: str) -> None:
    store = await migrated(mysql_url)
    try:
        ids = await asyncio.to_thread(store.job_insert_many_sync, [job(), job(depends_on=[])])
        assert await store.job_count(JobFilter(ids=tuple(ids))) == 2
    finally:
        await store.close()


async def test_migrate_is_repeatable_and_versions_match_the_other_stores(mysql_url: str) -> None:
    from kiln.stores import _migrations

    store = await migrated(mysql_url)
    try:
        assert await store.migrate() == []
        await store.schema_check()
        assert _migrations.latest("kiln.stores.mysql") == _migrations.latest("kiln.stores.sqlite")
    finally:
        await store.close()


async def test_admission_skips_a_key_whose_row_another_holds(mysql_url: str) -> None:
    """Another transaction holds the key's row lock (another admitter, a producer's open
    transaction declaring the limit): the admission skips the key at once (busy), never
    waits on it, and the next one, after the commit, admits with the time it ran."""
    store = await migrated(mysql_url)
    holder = await asyncmy.connect(autocommit=False, **args_of(mysql_url))
    try:
        await store.rate_limit_declare("api", RateLimit(rate=10, per=1.0, burst=10))
        [job_id] = await store.job_insert_many([job(rate_key="api")])
        async with holder.cursor() as cur:
            await cur.execute("SELECT 1 FROM kiln_rate_limits WHERE `key` = 'api' FOR UPDATE")
            skipped = await asyncio.wait_for(store.jobs_admit("api", 10), 5)
            assert skipped.busy and skipped.admitted == []
            await cur.execute("SELECT UTC_TIMESTAMP(6)")
            released_at = (await cur.fetchone())[0]
        await holder.commit()
        result = await asyncio.wait_for(store.jobs_admit("api", 10), 10)
        assert not result.busy and [a.job_id for a in result.admitted] == [job_id]
        row = await store.job_get(job_id)
        assert row is not None and row.admitted_at is not None
        assert row.admitted_at.replace(tzinfo=None) >= released_at
    finally:
        await holder.ensure_closed()
        await store.close()


async def test_claims_of_two_stores_never_overlap(mysql_url: str) -> None:
    one = await migrated(mysql_url)
    two = MySQLStore(mysql_url)
    try:
        await one.job_insert_many([job() for _ in range(60)])
        got = await asyncio.gather(*(claim(s, limit=7) for s in [one, two] * 6))
        ids = [r.id for rows in got for r in rows]
        assert len(ids) == len(set(ids)) == 60
    finally:
        await one.close()
        await two.close()


def test_app_enqueue_joins_a_pymysql_transaction(mysql_url: str) -> None:
    import kiln

    with kiln.App(mysql_url) as app:
        app.migrate()
        a = args_of(mysql_url)
        conn = pymysql.connect(host=a["host"], port=a["port"], user=a["user"],
                               password=a["password"], database=a["db"])
        try:
            app.enqueue("order.ship", {"order": 1}, conn=conn)
            conn.rollback()
            app.enqueue("order.ship", {"order": 2}, conn=conn)
            assert app._portal.run(count(app)) == 0, "not visible before the caller commits"
            conn.commit()
        finally:
            conn.close()
        assert app._portal.run(count(app)) == 1


async def test_app_aenqueue_joins_an_asyncmy_transaction(mysql_url: str) -> None:
    import kiln

    app = kiln.App(mysql_url)
    await app.amigrate()
    conn = await asyncmy.connect(autocommit=False, **args_of(mysql_url))
    try:
        await app.aenqueue("order.ship", {"order": 1}, conn=conn)
        await conn.rollback()
        await app.aenqueue("order.ship", {"order": 2}, delay=5, conn=conn)
        assert await count(app) == 0
        await conn.commit()
    finally:
        await conn.ensure_closed()
    assert await count(app) == 1
    await app.aclose()


async def count(app: Any) -> int:
    store = app.new_store()
    try:
        return int(await store.job_count(JobFilter()))
    finally:
        await store.close()


async def test_an_app_server_runs_jobs_on_a_lent_pool_of_two(mysql_url: str) -> None:
    import kiln

    pool = await asyncmy.create_pool(minsize=1, maxsize=2, autocommit=True, **args_of(mysql_url))
    app = kiln.App(mysql_url, pool=pool)
    ran = asyncio.Event()

    @app.job("ping")
    async def ping(job: kiln.Job) -> None:
        await job.set_param("seen", True)
        ran.set()

    try:
        await app.amigrate()
        server = app.server({"default": 2}, fast_config(shutdown_timeout=None))
        task = asyncio.create_task(server.run())
        job_id = await app.aenqueue("ping", {})
        await asyncio.wait_for(ran.wait(), 10)
        server.stop()
        await asyncio.wait_for(task, 20)
        row = await app.client().get(job_id)
        assert row is not None and row.state.value == "completed" and row.params == {"seen": True}
        await app.aclose()
    finally:
        pool.close()
        await pool.wait_closed()


async def test_a_dependent_inserted_as_its_dependency_completes_is_never_stranded(
    mysql_url: str,
) -> None:
    """A completion commits in one trip only where has_dependents is false; an insert
    that marks the dependency at the same moment must push it onto the releasing path."""
    one = await migrated(mysql_url)
    two = MySQLStore(mysql_url)
    try:
        for _ in range(15):
            [a] = await one.job_insert_many([job(kind="a")])
            [ra] = await one.job_claim("q", ["a"], 1, "s1")
            applied, [c] = await asyncio.gather(
                one.job_results_apply([result(ra)]),
                two.job_insert_many([job(kind="c", depends_on=[a])]),
            )
            assert applied.applied == 1
            assert await state_of(one, c) == "available"
        [b] = await one.job_insert_many([job(kind="b")])
        [rb] = await one.job_claim("q", ["b"], 1, "s1")
        [d] = await one.job_insert_many([job(kind="d", depends_on=[b])])  # b is running
        applied = await one.job_results_apply([result(rb)])
        assert applied.applied == 1 and applied.released == {"q": 1}
        assert await state_of(one, d) == "available"
    finally:
        await one.close()
        await two.close()


async def test_close_during_a_read_returns_its_connection_and_ends(mysql_url: str) -> None:
    """close() drops the store's pool and waits for every connection to come back: a
    read in flight gave its connection back to the store's pool as it then was (None),
    so it never came back and close() waited forever (a dashboard closed during a slow
    count at 3,000,000 jobs on MariaDB hung; bench/RESULTS.md, "scale45")."""
    from kiln.stores.mysql._plan import one

    store = await migrated(mysql_url)

    def slow() -> Any:
        return (yield one("SELECT SLEEP(1)"))[0]

    read = asyncio.create_task(store._read("slow read", slow))
    p = urlsplit(mysql_url)
    probe = pymysql.connect(host=p.hostname, port=p.port or 3306, user=p.username or "root",
                            password=p.password or "", autocommit=True)
    try:
        with probe.cursor() as cur:
            for _ in range(500):  # until the read is running (its own event: the server's)
                cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST"
                            " WHERE INFO = 'SELECT SLEEP(1)'")
                if cur.fetchone()[0]:
                    break
                await asyncio.sleep(0.01)
            else:
                pytest.fail("the read never started")
    finally:
        probe.close()
    await asyncio.wait_for(store.close(), 10)  # hung before the fix
    await asyncio.gather(read, return_exceptions=True)
