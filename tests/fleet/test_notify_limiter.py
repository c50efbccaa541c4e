"""The notify limiter (issue 41 item 3): with ``notify_window`` (2 ms by default), a
plain insert sends no NOTIFY in its transaction; once it has committed, the store's
payer sends its queue's wake-up, at once if the queue had none from this process within
the window, else when the window ends, so no job waits for a poll and a process sends
a queue's NOTIFY at most once per window. With a Bus (``notify=False``) the store sends
no NOTIFY at all."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

import kiln
from kiln._model._job import JobFilter, NewJob
from kiln.stores import Store, store_from_url
from kiln.stores.postgres import PostgresStore
from kiln.stores.postgres._limiter import NOTIFY_WINDOW, NotifyLimiter
from tests.support.config import fast_config
from tests.support.waits import wait_for


def _private(url: str) -> str:
    """``url`` with kiln's schema= setting for its schema, so the notifications go on the
    schema's own channel: tests of other schemas, on the default channel, are not heard."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["schema"] = query["options"].removeprefix("-csearch_path=")
    return urlunsplit(parts._replace(query=urlencode(query)))


async def _opened(url: str, **options: float) -> Store:
    store = store_from_url(_private(url), **options)  # type: ignore[arg-type]
    await store.open()
    await store.migrate()
    return store


async def _heard(listener: Store) -> list[tuple[float, str]]:
    heard: list[tuple[float, str]] = []
    await listener.listen(lambda channel, payload: heard.append((time.monotonic(), payload)))
    return heard


async def test_a_burst_sends_one_notify_and_the_one_owed_at_the_window_end(
    postgres_url: str,
) -> None:
    producer = await _opened(postgres_url, notify_window=0.5)
    listener = await _opened(postgres_url)
    try:
        heard = await _heard(listener)
        began = time.monotonic()
        for _ in range(20):
            await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail")])
        burst = time.monotonic() - began
        await wait_for(lambda: len([p for _, p in heard if p == "mail"]) >= 2 or None, 5,
                       "the owed wake-up")
        await asyncio.sleep(1.2)
        mails = [t for t, p in heard if p == "mail"]
        if burst < 0.5:  # the burst fit in one window (a loaded machine may be slower)
            assert len(mails) == 2  # 20 inserts: the first one's NOTIFY, the owed one
        assert 2 <= len(mails) <= 2 + int(burst / 0.5)  # one per window, and the one owed
        # at the window's end, not at a poll
        assert mails[-1] - began < burst + 0.5 + 0.5
        counts = {c.queue: c.count for c in await listener.job_counts()}
        assert counts == {"mail": 20}
        # a delayed job still says when it is due, whatever the window
        await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail", delay=60)])
        await wait_for(lambda: any(p.startswith("scheduled:") for _, p in heard) or None, 5,
                       "the scheduled notification")
    finally:
        await producer.close()
        await listener.close()


async def test_sync_inserts_are_limited_too_and_paid_by_the_store_thread(
    postgres_url: str,
) -> None:
    producer = await _opened(postgres_url, notify_window=0.5)
    listener = await _opened(postgres_url)
    try:
        heard = await _heard(listener)
        began = time.monotonic()
        for _ in range(10):  # sync code, as a web request's app.enqueue
            await asyncio.to_thread(producer.job_insert_many_sync,
                                    [NewJob(kind="k", args={}, queue="mail")])
        burst = time.monotonic() - began
        await wait_for(lambda: len([p for _, p in heard if p == "mail"]) >= 2 or None, 5,
                       "the owed wake-up")
        mails = [t for t, p in heard if p == "mail"]
        assert 2 <= len(mails) <= 2 + int(burst / 0.5)
        assert mails[-1] - began < burst + 0.5 + 0.5  # not at a poll
        # one more owed at close is sent then, not never
        await asyncio.sleep(0.6)
        await asyncio.to_thread(producer.job_insert_many_sync,
                                [NewJob(kind="k", args={}, queue="mail")])  # paid at once
        await asyncio.to_thread(producer.job_insert_many_sync,
                                [NewJob(kind="k", args={}, queue="mail")])  # owed
        before = len([p for _, p in heard if p == "mail"])
        await producer.close()
        await wait_for(lambda: len([p for _, p in heard if p == "mail"]) >= before + 1
                       or None, 5, "the wake-up owed at close")
    finally:
        await producer.close()
        await listener.close()


async def test_without_a_window_every_insert_notifies(postgres_url: str) -> None:
    producer = await _opened(postgres_url, notify_window=0)
    listener = await _opened(postgres_url)
    try:
        heard = await _heard(listener)
        for _ in range(5):
            await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail")])
        await wait_for(lambda: len(heard) >= 5 or None, 5, "five wake-ups")
    finally:
        await producer.close()
        await listener.close()


def test_a_wake_up_is_owed_from_the_commit_and_paid_at_once_or_at_the_window_end() -> None:
    now = [100.0]
    limiter = NotifyLimiter(0.05, clock=lambda: now[0])
    assert limiter.delay() is None and limiter.due() == []  # nothing landed, nothing owed
    assert limiter.landed(["mail"])  # the first commit: owed, and due at once
    assert limiter.delay() == 0.0
    assert limiter.due() == ["mail"]
    assert limiter.delay() is None
    assert limiter.landed(["mail"])  # inside the window: owed at its end
    assert not limiter.landed(["mail"])  # already owed: the payer need not look again
    assert limiter.delay() == pytest.approx(0.05)
    now[0] += 0.049
    assert limiter.due() == []
    assert not limiter.landed(["other"])  # the payer looks again within the window ...
    assert limiter.delay() == 0.0  # ... and finds another queue due at once, mail not
    assert limiter.due() == ["other"]
    now[0] += 0.002
    assert limiter.due() == ["mail"]
    assert limiter.delay() is None
    assert limiter.landed(["mail"])
    assert limiter.settle() == ["mail"]  # closing: whatever is owed goes now
    assert limiter.delay() is None and limiter.due() == []


async def test_the_limiter_is_on_by_default(postgres_url: str) -> None:
    assert NOTIFY_WINDOW == 0.002
    producer = await _opened(postgres_url)
    listener = await _opened(postgres_url)
    try:
        heard = await _heard(listener)
        began = time.monotonic()
        await asyncio.gather(*(  # 8 inserts at once: all within one window, or a few
            producer.job_insert_many([NewJob(kind="k", args={}, queue="mail")])
            for _ in range(8)))
        burst = time.monotonic() - began
        await wait_for(lambda: [p for _, p in heard if p == "mail"] or None, 5, "a wake-up")
        await asyncio.sleep(0.2)  # any wake-up still owed has gone out by now
        mails = [t for t, p in heard if p == "mail"]
        # one per window at most (and the one owed): fewer than one per insert
        assert len(mails) <= 2 + int(burst / NOTIFY_WINDOW)
        if burst < NOTIFY_WINDOW * 3:
            assert len(mails) < 8
        # at the window's end at the latest
        assert mails[-1] - began < burst + NOTIFY_WINDOW + 0.1
    finally:
        await producer.close()
        await listener.close()


async def test_without_notify_the_store_sends_none_and_does_not_listen(
    postgres_url: str,
) -> None:
    producer = await _opened(postgres_url, notify=False)
    listener = await _opened(postgres_url)
    try:
        assert not producer.capabilities.listen_notify
        heard = await _heard(listener)
        await listener.job_insert_many([NewJob(kind="k", args={}, queue="probe")])
        await wait_for(lambda: heard or None, 5, "the listener's own insert heard")
        # plain, delayed, unique and tagged inserts, a cancel, a pause: none notifies
        await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail")])
        await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail", delay=60)])
        await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail",
                                               unique_key="u1")])
        await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail",
                                               tags=("a",))])
        producer.job_insert_many_sync([NewJob(kind="k", args={}, queue="mail")])
        assert await producer.jobs_cancel(JobFilter(queue="mail")) == 5
        await producer.queue_pause("mail", "test")
        await listener.job_insert_many([NewJob(kind="k", args={}, queue="probe")])
        await wait_for(lambda: len(heard) >= 2 or None, 5, "the second probe heard")
        await asyncio.sleep(0.2)
        assert [p for _, p in heard] == ["probe", "probe"]
    finally:
        await producer.close()
        await listener.close()


async def test_an_app_with_a_bus_wakes_its_server_through_the_bus_only(
    postgres_url: str,
) -> None:
    app = kiln.App(_private(postgres_url), bus=kiln.InProcessBus())
    ran = asyncio.Event()

    @app.job("ping", queue="mail")
    async def ping(job: kiln.Job) -> None:
        ran.set()

    await app.amigrate()
    listener = await _opened(postgres_url)
    server = app.server({"mail": 1}, fast_config(poll_interval=30))
    task = asyncio.create_task(server.run())
    try:
        heard = await _heard(listener)
        await wait_for(lambda: server.stats().state == "running" or None, 10, "the server")
        began = time.monotonic()
        await app.aenqueue("ping", {})
        await asyncio.wait_for(ran.wait(), 5)
        assert time.monotonic() - began < 5  # the bus woke it, not its 30 s poll
        await asyncio.sleep(0.2)
        assert heard == []  # and no NOTIFY went out
    finally:
        server.stop()
        await task
        await app.aclose()
        await listener.close()


async def _sender_pids(
    conn: psycopg.AsyncConnection[Any], n: int, timeout: float = 5.0
) -> list[int]:
    """The backend pids of the next ``n`` notifications ``conn`` hears in ``timeout``."""
    return [note.pid async for note in conn.notifies(timeout=timeout, stop_after=n)]


async def test_no_notify_rides_in_a_producers_commit(postgres_url: str) -> None:
    """The wake-ups of plain inserts come from the store's payer connection after the
    commit (a producer's commit never takes the notify lock); an insert joined to the
    caller's transaction still notifies with that commit, and only then."""
    producer = cast(PostgresStore, await _opened(postgres_url))
    channel = producer.settings.channel
    conninfo = producer._conninfo
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as listen:
        await listen.execute(f'LISTEN "{channel}"')
        try:
            for _ in range(3):  # sparse: each insert's wake-up goes out at once
                await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail")])
                pids = await _sender_pids(listen, 1)
                assert producer._sync_conn is not None
                assert pids == [producer._sync_conn.info.backend_pid]
                await asyncio.sleep(NOTIFY_WINDOW * 5)
            async with await psycopg.AsyncConnection.connect(conninfo) as mine:
                await producer.job_insert_many([NewJob(kind="k", args={}, queue="mail")],
                                               conn=mine)
                assert await _sender_pids(listen, 1, 0.3) == []  # nothing before the commit
                await mine.commit()
                assert await _sender_pids(listen, 1) == [mine.info.backend_pid]
        finally:
            await producer.close()
