"""How a producer resolves a kind's options: option > local declaration > published >
defaults; the published ones cached (no read for a local kind, one read per miss)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

import pytest

import kiln
from kiln._catalog import KindCatalog
from kiln._kinds import Kind, make_kind
from kiln.stores import Store
from tests.stores.factories import server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def publish(store: Store, *kinds: tuple[str, dict[str, Any]], server_id: str = "s1") -> None:
    declared = [make_kind(name, lambda job: None, **options) for name, options in kinds]
    await store.server_register(server(server_id))
    await store.kinds_publish(server_id, "host", 1, [k.declaration() for k in declared])


def client(store: Store, clock: Clock, local: dict[str, Kind] | None = None,
           **catalog: float) -> kiln.Client:
    kinds = {} if local is None else local
    return kiln.Client(store, kinds, catalog=KindCatalog(store, kinds, clock=clock, **catalog))


async def test_a_local_declaration_costs_no_read(store: Store) -> None:
    await publish(store, ("mail.send", {"queue": "published"}))
    local = {"mail.send": make_kind("mail.send", lambda job: None, queue="local")}
    c = client(store, Clock(), local)
    ids = [await c.enqueue("mail.send", {}) for _ in range(20)]
    assert c.catalog.loads == 0
    rows = await store.job_list(kiln.JobFilter(ids=tuple(ids)), limit=50)
    assert {r.queue for r in rows} == {"local"}


async def test_published_declarations_are_read_once_then_cached(store: Store) -> None:
    await publish(store, ("mail.send", {"queue": "mail", "max_attempts": 3, "priority": 2}))
    clock = Clock()
    c = client(store, clock, ttl=30.0)
    ids = [await c.enqueue("mail.send", {}) for _ in range(20)]
    assert c.catalog.loads == 1
    rows = [await store.job_get(i) for i in ids]
    assert {(r.queue, r.max_attempts, r.priority) for r in rows if r} == {("mail", 3, 2)}
    clock.now += 31  # past the ttl: a republished declaration is picked up
    await publish(store, ("mail.send", {"queue": "mail2"}), server_id="s2")
    row = await store.job_get(await c.enqueue("mail.send", {}))
    assert row is not None and row.queue == "mail2" and c.catalog.loads == 2


async def test_options_win_over_the_published_declaration(store: Store) -> None:
    await publish(store, ("t.boom", {"queue": "mail", "max_attempts": 3}))
    c = client(store, Clock())
    row = await store.job_get(await c.enqueue("t.boom", {}, queue="other", max_attempts=9))
    assert row is not None and (row.queue, row.max_attempts) == ("other", 9)


async def test_misses_read_at_most_once_per_interval(store: Store) -> None:
    clock = Clock()
    c = client(store, clock, miss_interval=1.0)
    for _ in range(10):
        await c.enqueue("nobody.declared", {})
    assert c.catalog.loads == 1 and c.declaration("nobody.declared") is None
    await publish(store, ("nobody.declared", {"queue": "late"}))  # its worker starts
    clock.now += 1.5
    row = await store.job_get(await c.enqueue("nobody.declared", {}))
    assert row is not None and row.queue == "late" and c.catalog.loads == 2


async def test_a_known_only_app_accepts_published_kinds_only(store: Store) -> None:
    await publish(store, ("other.service", {"queue": "theirs"}))
    local = {"mine": make_kind("mine", lambda job: None)}
    c = client(store, Clock(), local)
    row = await store.job_get(await c.enqueue("other.service", {}))
    assert row is not None and row.queue == "theirs"
    with pytest.raises(kiln.UnknownKindError, match=r"typo\.kind"):
        await c.enqueue("typo.kind", {})
    assert await store.job_count(kiln.JobFilter()) == 1  # nothing written


def test_sync_enqueue_resolves_from_another_thread(store_url: str) -> None:
    app = kiln.App(store_url)  # no handlers: sync enqueue on the App's sync store
    app.migrate()
    try:
        async def setup() -> None:
            s = app.new_store()
            await s.open()
            try:
                await publish(s, ("t.x", {"queue": "mail", "max_attempts": 2}))
            finally:
                await s.close()

        asyncio.run(setup())
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            ids = list(pool.map(lambda _: app.enqueue("t.x", {}), range(4)))
        rows = asyncio.run(_rows(app, ids))
        assert {(r.queue, r.max_attempts) for r in rows} == {("mail", 2)}
    finally:
        app.close()


async def _rows(app: kiln.App, ids: Sequence[int]) -> list[kiln.JobRow]:
    s = app.new_store()
    await s.open()
    try:
        return await s.job_list(kiln.JobFilter(ids=tuple(ids)), limit=10)
    finally:
        await s.close()
