"""docs/guide.md, "Concurrency limits": its two blocks run as written, with two servers
and a producer that holds no handler, and the limits hold: counted by the handlers as
they run, and by the database while they run."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import re
from typing import Any

import pytest

import kiln
from tests.support.docblocks import blocks_under_test


@dataclasses.dataclass
class Witness:
    running: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    most: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    done: int = 0

    def handler(self, by: str) -> Any:
        async def handle(job: kiln.Job) -> None:
            key = str(job.args.get(by, by))
            self.running[key] += 1
            self.most[key] = max(self.most[key], self.running[key])
            try:
                await asyncio.sleep(0.05)
            finally:
                self.running[key] -= 1
                self.done += 1

        return handle


async def _sample(store: kiln.stores.Store, seen: collections.Counter[str]) -> None:
    while True:
        for group, n in (await store.concurrency_in_use()).items():
            seen[group] = max(seen[group], n)
        await asyncio.sleep(0.01)


async def test_the_guides_limits_hold_across_two_servers(store_url: str) -> None:
    worker_block, producer_block = blocks_under_test("guide.md", __file__)[:2]
    namespace: dict[str, Any] = {"kiln": kiln, "url": store_url}
    exec(worker_block, namespace)
    workers: kiln.App = namespace["workers"]
    workers.migrate()
    witness = Witness()
    servers: list[kiln.Server] = [namespace["first"], namespace["second"]]
    config = kiln.ServerConfig(poll_interval=0.1)
    for server in servers:  # the block's kinds, with handlers that count themselves
        server.config = config
        server.kinds["tenant.sync"] = dataclasses.replace(
            server.kinds["tenant.sync"], handler=witness.handler("tenant"))
        server.kinds["export.run"] = kiln._model._kinds.make_kind(
            "export.run", witness.handler("exports"), queue="exports")
    tasks = [asyncio.create_task(s.run()) for s in servers]
    seen: collections.Counter[str] = collections.Counter()
    sampler = asyncio.create_task(_sample(servers[0]._store, seen))
    try:
        while any(s.stats().state != "running" for s in servers):
            assert not any(t.done() for t in tasks), tasks
            await asyncio.sleep(0.02)
        await asyncio.to_thread(exec, producer_block, namespace)
        web: kiln.App = namespace["web"]
        assert "tenant" in namespace["refused"]  # the missing key, named
        exports = [web.enqueue("export.run", {"n": n}) for n in range(9)]
        total = len(namespace["ids"]) + len(exports)
        client = kiln.Client(servers[0]._store)
        done = kiln.JobFilter(states=(kiln.JobState.COMPLETED,))
        async with asyncio.timeout(30):  # every job completed (its result written)
            while witness.done < total or await client.count(done) < total:
                await asyncio.sleep(0.02)
    finally:
        sampler.cancel()
        for server in servers:
            server.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 20)
        namespace["web"].close()
        workers.close()
    assert dict(witness.most) == {"a": 2, "b": 2, "exports": 3}
    assert seen["kind:tenant.sync"] <= 4 and seen["queue:exports"] <= 3, seen


def test_a_key_function_is_refused_to_a_producer_without_the_handler(store_url: str) -> None:
    workers = kiln.App(store_url)
    workers.migrate()

    @workers.job("org.job", concurrency=kiln.Concurrency(max=1, key=lambda a: a["org"]))
    async def org_job(job: kiln.Job) -> None: ...

    asyncio.run(_publish(workers.server()))
    producer = kiln.App(store_url)
    try:
        with pytest.raises(kiln.ValidationError, match=r"'org\.job'.*function"):
            producer.enqueue("org.job", {"org": 1})
        assert workers.enqueue("org.job", {"org": 1})  # the app holding it computes the key
    finally:
        producer.close()
        workers.close()
    asyncio.run(_count_is_one(store_url))


async def _publish(server: kiln.Server) -> None:
    try:
        await server.publish_kinds()
    finally:
        await server._store.close()


async def _count_is_one(url: str) -> None:
    store = kiln.stores.store_from_url(url)
    try:
        assert await kiln.Client(store).count(kiln.JobFilter(kind="org.job")) == 1
    finally:
        await store.close()


@pytest.mark.parametrize(("limit", "field"), [
    (lambda: kiln.Concurrency(max=0), "concurrency.max"),
    (lambda: kiln.Concurrency(max=10_001), "concurrency.max"),
    (lambda: kiln.Concurrency(max=2, key="tenant"), "concurrency.key"),
])
def test_bad_limits_are_refused(limit: Any, field: str) -> None:
    with pytest.raises(kiln.ConfigError, match=re.escape(field)):
        limit()


def test_a_queue_limit_has_no_key(store_url: str) -> None:
    app = kiln.App(store_url)
    with pytest.raises(kiln.ConfigError, match="without a key"):
        app.queue_concurrency("q", kiln.Concurrency(max=2, key="args.t"))
    app.close()


def test_enqueue_many_keys_each_job_and_refuses_a_missing_key(store_url: str) -> None:
    app = kiln.App(store_url)
    app.migrate()

    @app.job("t.job", concurrency=kiln.Concurrency(max=1, key="args.t"))
    async def t_job(job: kiln.Job) -> None: ...

    try:
        with pytest.raises(kiln.ValidationError, match=r"args\.t.*'t'"):
            app.enqueue_many([("t.job", {"t": 1}), ("t.job", {"n": 2})])
        ids = app.enqueue_many([("t.job", {"t": 1}), ("t.job", {"t": 2}), ("t.job", {"t": 1})])
    finally:
        app.close()
    assert len(ids) == 3
    asyncio.run(_claimed_one_per_tenant(store_url))


async def _claimed_one_per_tenant(url: str) -> None:
    store = kiln.stores.store_from_url(url)
    try:
        # the refused batch wrote nothing
        assert await kiln.Client(store).count(kiln.JobFilter(kind="t.job")) == 3
        rows = await store.job_claim("default", ["t.job"], 10, "s1", limited=True)
        assert sorted(r.args["t"] for r in rows) == [1, 2]  # one per key: per-job keys
    finally:
        await store.close()
