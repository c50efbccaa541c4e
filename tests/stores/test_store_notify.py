"""Notifications, for stores that declare listen_notify (PostgreSQL LISTEN/NOTIFY)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import psycopg
import pytest

from kiln._job import JobFilter, Outcome, RateLimit
from kiln.stores import Store
from tests.plugins.databases import POSTGRES_URL
from tests.stores.factories import claim, complete, eventually, insert, job, result


class Inbox:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def __call__(self, channel: str, payload: str) -> None:
        self.items.append((channel, payload))

    async def expect(self, *payloads: str) -> None:
        async def arrived() -> bool:
            return sorted(p for _, p in self.items) == sorted(payloads)

        try:
            await eventually(arrived, timeout=2.0)
        except AssertionError:
            raise AssertionError(f"wanted {sorted(payloads)}, got {self.items}") from None
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
    await store.job_insert_many([job(queue=f"q{i % 2}") for i in range(50)])
    await inbox.expect("q0", "q1")
    assert all(channel == "kiln" for channel, _ in inbox.items)


async def test_delayed_insert_notifies_the_earliest_run_at(store: Store, inbox: Inbox) -> None:
    before = time.time()
    await store.job_insert_many([job(delay=30), job(delay=10)])
    await eventually(lambda: _some(inbox))
    [(_, payload)] = inbox.items
    kind, _, at = payload.partition(":")
    assert kind == "scheduled" and 5 < float(at) - before < 15


async def _some(inbox: Inbox) -> bool:
    return bool(inbox.items)


async def test_releases_and_requeues_notify(store: Store, inbox: Inbox) -> None:
    [a] = await insert(store, job(queue="dep"))
    await inbox.expect("dep")
    await insert(store, job(queue="child", depends_on=[a]))
    await insert(store, job(queue="soon", delay=0.1))
    await eventually(lambda: _some(inbox))
    inbox.items.clear()
    [row] = await store.job_claim("dep", ["k"], 1, "s1")
    await complete(store, row)
    await inbox.expect("child")
    await asyncio.sleep(0.15)
    await store.jobs_release_due()
    await inbox.expect("soon")
    [row] = await store.job_claim("soon", ["k"], 1, "s1")
    await store.job_results_apply([result(row, Outcome.FAILED)])
    await store.jobs_requeue(JobFilter(ids=(row.id,)))
    await inbox.expect("soon")
    await insert(store, job(queue="limited", rate_key="r", rate_limit=RateLimit(rate=5)))
    await store.jobs_admit("r", 10)
    await inbox.expect("limited")
    [row] = await claim(store, queue="limited")
    await store.job_results_apply([result(row, Outcome.RETRY)])
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

    await eventually(back, timeout=5.0)
    await insert(store, job(queue="after"))
    await inbox.expect("after")


async def test_listening_stops_on_close(store: Store, inbox: Inbox) -> None:
    await store.close()
    assert not store.listening()
