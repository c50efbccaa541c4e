"""How a producer resolves a kind's options: option > local declaration > published >
defaults; the published ones cached (no read for a local kind, one read per miss)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from typing import Any

import pytest

import kiln
from kiln._client._catalog import KindCatalog
from kiln._model._job import KindDeclaration
from kiln._model._kinds import Declaration, Kind, make_kind
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


async def test_a_declaration_this_kiln_cannot_read_refuses_its_own_kind_only(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A newer kiln published an option value this one refuses (audit M6): the other
    kinds enqueue with their declarations; the kind itself is refused, naming it and
    the option, and the row is logged once however many reads see it."""
    await publish(store, ("email.send", {"queue": "mail", "max_attempts": 3}))
    newer = make_kind("report.v2", lambda job: None, queue="reports").declaration()
    options = {**newer.options, "unique": {"by": ["meta.tenant"], "key": None,
                                           "states": None, "period": None}}
    await store.server_register(server("newer"))
    await store.kinds_publish("newer", "host", 1, [
        KindDeclaration(kind="report.v2", options=options, digest="newer1"),
    ])
    clock = Clock()
    c = client(store, clock, miss_interval=1.0)
    with caplog.at_level("WARNING", logger="kiln.catalog"):
        mail = await store.job_get(await c.enqueue("email.send", {}))
        other = await store.job_get(await c.enqueue("anything.else", {}))
        with pytest.raises(kiln.ConfigError) as refused:
            await c.enqueue("report.v2", {})
        clock.now += 2  # a miss reads again: the row is still there, not logged again
        await c.enqueue("another.one", {})
    assert mail is not None and (mail.queue, mail.max_attempts) == ("mail", 3)
    assert other is not None and other.queue == "default"
    assert refused.value.field == "unique.by" and refused.value.value == "meta.tenant"
    assert "kind 'report.v2'" in str(refused.value)
    assert c.catalog.loads == 2
    warned = [r for r in caplog.records if "report.v2" in r.getMessage()]
    assert len(warned) == 1 and "unique.by" in warned[0].getMessage()
    assert await store.job_count(kiln.JobFilter(kind="report.v2")) == 0


@pytest.mark.parametrize(("option", "value", "field"), [
    ("concurrency", {"max": 20000, "key": None}, "concurrency.max"),
    ("rate_limit", {"rate": 10}, "rate_limit"),
    ("tags", "not-a-list", "tags"),
    ("max_attempts", "three", "max_attempts"),
])
def test_an_unreadable_option_names_the_kind_and_the_option(
    option: str, value: Any, field: str
) -> None:
    declared = make_kind("t.x", lambda job: None).declaration()
    published = KindDeclaration(kind="t.x", options={**declared.options, option: value},
                                     digest="d")
    with pytest.raises(kiln.ConfigError) as refused:
        Declaration.of(published)
    assert refused.value.field == field and "kind 't.x'" in str(refused.value)
