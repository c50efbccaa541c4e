"""The notify limiter (issue 41 item 3): with ``notify_window`` (10 ms by default), a
process sends a queue's NOTIFY at most once per window; an insert inside it goes quiet,
and the wake-up it is owed goes out when the window ends, so no job waits for a poll.
With a Bus (``notify=False``) the store sends no NOTIFY at all."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

import kiln
from kiln._model._job import JobFilter, NewJob
from kiln.stores import Store, store_from_url
from kiln.stores.postgres._limiter import GRACE, NOTIFY_WINDOW, STUCK, NotifyLimiter
from kiln.stores.postgres._owed import OwedPayer
from tests.support.config import fast_config
from tests.support.waits import wait_for, wait_for_sync


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
        # a grace after the window's end, not at a poll
        assert mails[-1] - began < burst + 0.5 * (1 + GRACE) + 0.5
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
        assert mails[-1] - began < burst + 0.5 * (1 + GRACE) + 0.5  # not at a poll
        # one more owed at close is sent then, not never
        await asyncio.sleep(0.5 * (1 + GRACE))
        await asyncio.to_thread(producer.job_insert_many_sync,
                                [NewJob(kind="k", args={}, queue="mail")])  # notifies
        await asyncio.to_thread(producer.job_insert_many_sync,
                                [NewJob(kind="k", args={}, queue="mail")])  # quiet
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


def test_a_notify_settles_only_the_quiet_inserts_that_landed_before_it() -> None:
    now = [100.0]
    limiter = NotifyLimiter(0.05, clock=lambda: now[0])
    assert not limiter.quiet("mail")  # notifies: the window's NOTIFY
    assert limiter.notified("mail") is None  # committed, nothing owed
    assert limiter.quiet("mail")  # a quiet insert, still in flight ...
    now[0] += 0.06
    assert not limiter.quiet("mail")  # ... when the next window's insert notifies
    assert limiter.notified("mail") is None
    limiter.landed("mail")  # it commits after that NOTIFY went out: still owed
    assert limiter.delay() == pytest.approx(0.05 * (1 + GRACE))
    now[0] += 0.05 * (1 + GRACE) - 0.001
    assert limiter.due() == []
    now[0] += 0.002
    assert limiter.due() == ["mail"]
    assert limiter.delay() is None
    assert limiter.quiet("mail")  # the owed one counts as this window's NOTIFY
    limiter.landed("mail")
    assert not limiter.quiet("other")
    assert limiter.notified("other") is None
    now[0] += 0.06
    assert not limiter.quiet("mail")  # carried by the first insert after the window
    assert limiter.notified("mail") is None
    assert limiter.delay() is None and limiter.due() == []


async def test_the_limiter_is_on_by_default(postgres_url: str) -> None:
    assert NOTIFY_WINDOW == 0.01
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
        # a grace after the window's end
        assert mails[-1] - began < burst + NOTIFY_WINDOW * (1 + GRACE) + 0.1
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


def test_the_payer_warns_once_while_its_sends_fail(caplog: pytest.LogCaptureFixture) -> None:
    outcomes: list[Exception | bool] = [RuntimeError("down"), RuntimeError("down"), True]

    def send(queues: list[str]) -> bool:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    payer = OwedPayer(NotifyLimiter(0.01), send)
    with caplog.at_level(logging.WARNING, logger="kiln.stores.postgres"):
        assert payer._pay(["mail"]) and payer._pay(["mail"]) and payer._pay(["mail"])
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "could not send" in m]) == 1  # not one a window
    assert messages[-1] == "kiln: owed wake-ups go out again"


class _CountedEvent(threading.Event):
    def __init__(self) -> None:
        super().__init__()
        self.sets = 0

    def set(self) -> None:
        self.sets += 1
        super().set()


def test_quiet_sync_inserts_wake_the_payer_only_for_an_earlier_wake_up() -> None:
    """The payer thread sleeps until the earliest owed wake-up; a sync producer's quiet
    inserts of the window owe nothing earlier, so they do not wake it (a thread switch
    per enqueue on the web-request path), but a queue owed sooner does."""
    now = [100.0]
    limiter = NotifyLimiter(10.0, clock=lambda: now[0])  # the thread sleeps 15 s (real)
    sent: list[list[str]] = []

    def send(queues: list[str]) -> bool:
        sent.append(queues)
        return True

    payer = OwedPayer(limiter, send)
    wake = payer._wake = _CountedEvent()
    try:
        assert not limiter.quiet("other")  # notified at 100
        limiter.notified("other")
        now[0] = 101.0
        assert not limiter.quiet("mail")  # notified at 101: owed by 116
        limiter.notified("mail")
        assert limiter.quiet("mail")
        payer.owe(limiter.landed("mail"))
        wait_for_sync(lambda: payer._until == 101.0 + 10.0 * (1 + GRACE) or None, 5,
                      "the payer asleep until mail's wake-up")
        woken = wake.sets
        for _ in range(100):
            assert limiter.quiet("mail")
            payer.owe(limiter.landed("mail"))
        assert wake.sets == woken  # owed no sooner: the thread sleeps on
        assert limiter.quiet("other")
        payer.owe(limiter.landed("other"))  # owed by 115: sooner
        assert wake.sets == woken + 1
        wait_for_sync(lambda: payer._until == 100.0 + 10.0 * (1 + GRACE) or None, 5,
                      "the payer asleep until other's wake-up")
        assert sent == []
    finally:
        payer.stop()
    assert sorted(q for queues in sent for q in queues) == ["mail", "other"]  # at stop


def test_one_notifying_insert_per_queue_in_flight() -> None:
    """While a queue's notifying insert waits (for the notify lock, say), the inserts
    after it go quiet even past the window, and their wake-up is due only once it has
    finished; one that failed leaves what it would have settled owed."""
    now = [100.0]
    limiter = NotifyLimiter(0.01, clock=lambda: now[0])
    assert not limiter.quiet("mail")  # notifies; in flight
    now[0] += 0.05  # five windows behind a queue of notifying commits
    assert limiter.quiet("mail")  # not a second NOTIFY into the same queue
    assert not limiter.quiet("other")  # another queue has its own
    limiter.landed("mail")  # committed after the notifying insert started: owed
    now[0] += 0.03
    assert limiter.due() == []  # not while in flight, unless stuck
    assert limiter.deadline() == pytest.approx(100.0 + 0.01 * STUCK)
    due = limiter.notified("mail")
    assert due == pytest.approx(100.0 + 0.01 * (1 + GRACE))
    assert limiter.due() == ["mail"]  # past due: paid now
    assert limiter.notified("other") is None  # nothing owed to it
    now[0] += 0.05
    assert not limiter.quiet("other")
    assert limiter.notified("other", ok=False) is not None  # failed: owed a wake-up
    assert limiter.delay() == pytest.approx(0.01 * (1 + GRACE))
    now[0] += 0.05
    assert limiter.due() == ["other"]
    # a notifying insert stuck in flight (its connection hung) holds nothing back for
    # long: what landed behind it is sent STUCK windows after it started, and a later
    # insert notifies again
    now[0] += 1.0
    assert not limiter.quiet("mail")
    started = now[0]
    assert limiter.quiet("mail")
    limiter.landed("mail")
    now[0] = started + 0.01 * STUCK - 0.001
    assert limiter.due() == [] and limiter.quiet("mail")
    now[0] = started + 0.01 * STUCK
    assert limiter.due() == ["mail"]
    now[0] += 0.011
    assert not limiter.quiet("mail")


def _heard_since(heard: list[tuple[float, str]], payload: str, since: float) -> list[float] | None:
    return [t for t, p in heard if p == payload and t >= since] or None


async def test_quiet_inserts_behind_a_notifying_one_are_woken(postgres_url: str) -> None:
    """Concurrent producers of one store: what the quiet inserts of a burst are owed is
    sent (none is left owed, none left in flight), and each burst is heard."""
    producer = await _opened(postgres_url)
    listener = await _opened(postgres_url)
    limiter = producer._limiter  # type: ignore[attr-defined]
    assert isinstance(limiter, NotifyLimiter)
    try:
        heard = await _heard(listener)
        job = NewJob(kind="k", args={}, queue="mail")
        for burst in range(5):
            began = time.monotonic()
            await asyncio.gather(*(producer.job_insert_many([job]) for _ in range(8)))
            await wait_for(lambda: (not limiter._owed and not limiter._inflight) or None, 5,
                           "every owed wake-up sent")
            await wait_for(functools.partial(_heard_since, heard, "mail", began), 5,
                           f"burst {burst} heard")
    finally:
        await producer.close()
        await listener.close()


async def test_the_owed_timer_moves_earlier_when_the_notifying_insert_ends(
    postgres_url: str,
) -> None:
    """A quiet insert that lands behind a notifying one in flight is owed a wake-up that
    is due when that insert counts as stuck (STUCK windows after it started); once it
    ends, the wake-up is due at its window's end, and the store's timer moves there
    (it stayed armed for the stuck deadline: about 100 ms late at the default window)."""
    window = 0.5
    store = await _opened(postgres_url, notify_window=window)
    limiter = store._limiter  # type: ignore[attr-defined]
    assert isinstance(limiter, NotifyLimiter)
    loop = asyncio.get_running_loop()
    try:
        assert not limiter.quiet("mail")  # a notifying insert starts: in flight
        await store.job_insert_many([NewJob(kind="k", args={}, queue="mail")])  # quiet
        armed = store._owed  # type: ignore[attr-defined]
        assert armed is not None and armed.when() - loop.time() > window * (STUCK - 2)
        limiter.notified("mail")  # it ended: what landed behind it is due soon
        store._owe()  # type: ignore[attr-defined]  # as _notifying does
        moved = store._owed  # type: ignore[attr-defined]
        assert moved is not None and moved.when() - loop.time() <= window * (1 + GRACE)
        assert armed.cancelled()
    finally:
        await store.close()
