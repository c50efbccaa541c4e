"""Notifications, for stores that declare listen_notify (PostgreSQL LISTEN/NOTIFY)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from kiln._model._job import JobFilter, Outcome, RateLimit
from kiln._model._wakeup import STATE
from kiln.stores import Store
from tests.plugins.databases import POSTGRES_URL
from tests.stores.factories import claim, complete, insert, job, result, state_of
from tests.support.waits import wait_for


class Inbox:
    """Collects notifications. Other test runs may share the database and its channel,
    so tests use queue names with this inbox's unique prefix and look only at those."""

    def __init__(self) -> None:
        self.prefix = f"n{uuid.uuid4().hex[:8]}-"
        self.items: list[tuple[str, str]] = []

    def __call__(self, channel: str, payload: str) -> None:
        self.items.append((channel, payload))

    def q(self, name: str) -> str:
        return self.prefix + name

    def mine(self) -> list[str]:
        return sorted(p[len(self.prefix):] for _, p in self.items if p.startswith(self.prefix))

    async def expect(self, *names: str) -> None:
        async def arrived() -> bool:
            return self.mine() == sorted(names)

        try:
            await wait_for(arrived, 2.0, "arrived()")
            await asyncio.sleep(0.05)  # nothing more than expected
            assert self.mine() == sorted(names)
        except AssertionError:
            raise AssertionError(f"wanted {sorted(names)}, got {self.items}") from None
        finally:
            self.items.clear()


@pytest.fixture
async def inbox(store: Store) -> AsyncIterator[Inbox]:
    if not store.capabilities.listen_notify:
        pytest.skip("store has no notifications (woken through a Bus)")
    box = Inbox()
    assert not store.listening()
    await store.listen(box)
    assert store.listening()
    yield box


async def test_insert_notifies_once_per_queue(store: Store, inbox: Inbox) -> None:
    await store.job_insert_many([job(queue=inbox.q(f"q{i % 2}")) for i in range(50)])
    await inbox.expect("q0", "q1")


async def test_delayed_insert_notifies_the_earliest_run_at(store: Store, inbox: Inbox) -> None:
    before = time.time()
    await store.job_insert_many([job(delay=30), job(delay=10)])

    async def scheduled() -> bool:
        return any(_due_in(p, before, 9, 11) for _, p in inbox.items)

    await wait_for(scheduled, 3.0, "scheduled()")
    assert not any(_due_in(p, before, 29, 31) for _, p in inbox.items)


def _due_in(payload: str, since: float, low: float, high: float) -> bool:
    kind, _, at = payload.partition(":")
    return kind == "scheduled" and low < float(at) - since < high


async def test_releases_and_requeues_notify(store: Store, inbox: Inbox) -> None:
    q = inbox.q
    [a] = await insert(store, job(queue=q("dep")))
    await inbox.expect("dep")
    await insert(store, job(queue=q("child"), depends_on=[a]))
    await insert(store, job(queue=q("soon"), delay=0.1))
    [row] = await store.job_claim(q("dep"), ["k"], 1, "s1")
    await complete(store, row)
    await inbox.expect("child")
    await asyncio.sleep(0.15)
    await store.jobs_release_due()
    await inbox.expect("soon")
    [row] = await store.job_claim(q("soon"), ["k"], 1, "s1")
    await store.job_results_apply([result(row, Outcome.FAILED)])
    await store.jobs_requeue(JobFilter(ids=(row.id,)))
    await inbox.expect("soon")
    limit = RateLimit(rate=5)
    await insert(store, job(queue=q("limited"), rate_key=q("r"), rate_limit=limit))
    await store.jobs_admit(q("r"), 10)
    await inbox.expect("limited")
    [row] = await claim(store, queue=q("limited"))
    await store.job_results_apply([result(row, Outcome.RETRY)])
    assert await state_of(store, row.id) == "pending"  # its retry waits for admission
    await asyncio.sleep(0.25)  # the bucket (1 token, 5 per second) refills
    assert [a.job_id for a in (await store.jobs_admit(q("r"), 10)).admitted] == [row.id]
    await inbox.expect("limited")


async def test_listener_reconnects_after_losing_its_connection(
    store: Store, inbox: Inbox
) -> None:
    listener = store._listener  # type: ignore[attr-defined]
    pid = listener.backend_pid
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    async def back() -> bool:
        return store.listening() and listener.backend_pid not in (None, pid)

    await wait_for(back, 5.0, "back()")
    states = [payload for channel, payload in inbox.items if channel == STATE]
    assert states == ["down", "up"]  # as a Bus reports its connection
    await insert(store, job(queue=inbox.q("after")))
    await inbox.expect("after")


async def test_listening_stops_on_close(store: Store, inbox: Inbox) -> None:
    await store.close()
    assert not store.listening()
