"""Conformance: published kind declarations (kiln_kinds), on every store.

The newest declaration a live server published wins (else the newest); rows of
servers no longer registered go when the kind is published again; two live servers
publishing one kind differently are a conflict; migration 4 applies on a database
already at version 3.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sqlite3
import time
from urllib.parse import urlsplit

import psycopg
import pytest

from kiln._model._job import JobFilter, KindDeclaration
from kiln.stores import Store, _migrations, store_from_url
from tests.plugins.databases import mysql_connect
from tests.stores.factories import server


def decl(kind: str = "k", queue: str = "q", max_attempts: int = 3) -> KindDeclaration:
    options = {"queue": queue, "priority": 0, "max_attempts": max_attempts, "timeout": None,
               "backoff": None, "rate_limit": None, "rate_key": None}
    return KindDeclaration(kind=kind, options=options, digest=f"{queue}-{max_attempts}")


async def publish(store: Store, server_id: str, *kinds: KindDeclaration, pid: int = 1) -> None:
    info = dataclasses.replace(server(server_id), pid=pid)
    await store.server_register(info)
    await store.kinds_publish(server_id, info.host, pid, list(kinds))


async def test_publish_then_resolve_newest(store: Store) -> None:
    assert await store.kind_declarations() == []
    await publish(store, "s1", decl("a", "mail", 3), decl("b"))
    assert await store.kind_declarations() == [decl("a", "mail", 3), decl("b")]
    await asyncio.sleep(0.002)  # a later database clock reading
    await publish(store, "s2", decl("a", "other", 7), pid=2)
    newest = {d.kind: d for d in await store.kind_declarations()}
    assert newest["a"] == decl("a", "other", 7)
    assert newest["b"] == decl("b")
    assert {d.kind: d for d in store.kind_declarations_sync()} == newest


async def test_a_live_server_s_declaration_is_the_one_in_use(store: Store) -> None:
    """The declaration producers use (and the adopter applies) is the newest a live
    server published: a newer one whose server stopped gives way; with none live, the
    newest still resolves."""
    await publish(store, "v2", decl("a", "q", 3))
    await asyncio.sleep(0.002)
    await publish(store, "v1", decl("a", "q", 25), pid=2)  # an old version restarted...
    assert await store.kind_declarations() == [decl("a", "q", 25)]
    await store.server_deregister("v1")  # ...and stopped: its row stays, not live
    assert await store.kind_declarations() == [decl("a", "q", 3)]
    assert store.kind_declarations_sync() == [decl("a", "q", 3)]
    await store.server_deregister("v2")
    assert await store.kind_declarations() == [decl("a", "q", 25)]  # none live: the newest


async def test_republish_renews_and_keeps_one_row_per_server(store: Store) -> None:
    await publish(store, "s1", decl("a", "q", 3))
    await publish(store, "s1", decl("a", "q", 5))
    rows = await store.kinds_list()
    assert [(r.server_id, r.declaration.digest, r.live) for r in rows] == [("s1", "q-5", True)]


async def test_conflict_counts_live_servers_only(store: Store) -> None:
    await publish(store, "s1", decl("a", "q", 3))
    await publish(store, "s2", decl("a", "q", 3), pid=2)
    assert await store.kind_conflicts() == 0  # same declaration twice
    await publish(store, "s3", decl("a", "mail", 3), decl("b"), pid=3)
    assert await store.kind_conflicts() == 1
    rows = await store.kinds_list()
    assert [r.declaration.kind for r in rows] == ["a", "a", "a", "b"]
    assert rows[0].server_id == "s3"  # newest first
    await store.server_deregister("s3")
    assert await store.kind_conflicts() == 0
    live = {r.server_id: r.live for r in await store.kinds_list()}
    assert live == {"s1": True, "s2": True, "s3": False}


async def test_publishing_drops_rows_of_gone_servers(store: Store) -> None:
    await publish(store, "old", decl("a", "q", 3), decl("b"))
    await store.server_deregister("old")
    await publish(store, "new", decl("a", "q", 4), pid=2)
    rows = {(r.declaration.kind, r.server_id) for r in await store.kinds_list()}
    assert rows == {("a", "new"), ("b", "old")}  # only the kinds published again


async def test_rows_of_a_deregistered_server_are_not_live(store: Store) -> None:
    await publish(store, "s1", decl("a", "q", 3), pid=42)
    await publish(store, "s2", decl("a", "q", 4), pid=42)  # same process, another server
    assert await store.kind_conflicts() == 1
    await store.server_deregister("s1")
    assert {r.server_id: r.live for r in await store.kinds_list()} == {"s1": False, "s2": True}
    assert await store.kind_conflicts() == 0


async def test_migration_4_on_a_version_3_database(
    empty_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = _migrations.load
    monkeypatch.setattr(_migrations, "load", lambda package: every(package)[:3])
    s = store_from_url(empty_store_url)
    await s.open()
    try:
        assert await s.migrate() == [1, 2, 3]
        version_3_job(empty_store_url)  # as kiln at version 3 wrote it
        monkeypatch.setattr(_migrations, "load", every)
        assert (await s.migrate())[0] == 4
        await s.schema_check()
        # read once migrated: this kiln's listing reads columns of later versions (tags)
        [job_id] = [r.id for r in await s.job_list(JobFilter())]
        assert (await s.job_get(job_id)) is not None
        assert await s.job_count(JobFilter()) == 1
        await publish(s, "s1", decl("a"))
        assert await s.kind_declarations() == [decl("a")]
    finally:
        await s.close()


V3_JOB = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, priority, run_at,"
    " attempt, max_attempts, errors, created_at, rescues) VALUES"
    " ('q', 'k', 'available', '{}', '{}', '{}', 0, NOW, 0, 3, '[]', NOW, 0)"
)


def version_3_job(url: str) -> None:
    """One job inserted with the version-3 columns only, by the backend's own driver."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        with contextlib.closing(sqlite3.connect(parts.path[1:])) as conn, conn:
            conn.execute(V3_JOB.replace("NOW", repr(time.time())))
    elif parts.scheme == "postgresql":
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(V3_JOB.replace("NOW", "now()").encode())
    else:
        conn = mysql_connect(url)
        with contextlib.closing(conn), conn.cursor() as cur:
            cur.execute(V3_JOB.replace("NOW", "UTC_TIMESTAMP(6)"))
