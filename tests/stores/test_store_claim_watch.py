"""ClaimWatch: claims that a store runs for an idle pool as notifications arrive.

Stores without ``claim_on_notify`` return no watch. On PostgreSQL the watch claims on
the LISTEN connection and hands over the rows before their commit; these tests hold
that claim on a table lock to look at it in flight, and cut its connection to see what
a lost commit reports.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from kiln._errors import StoreError, UnreachableError
from kiln._model._job import JobRow
from kiln.stores import Store
from kiln.stores._protocol import ClaimWatch
from kiln.stores.postgres import PostgresStore
from kiln.stores.postgres._claimer import Claimer, Watch
from kiln.stores.postgres._plan import Counter
from tests.flow.proxy import Proxy
from tests.stores.factories import insert, job, state_of
from tests.support.waits import wait_for


class Taken:
    """A watch's callback: records the rows, and what a callback-time check saw."""

    def __init__(self) -> None:
        self.rows: list[list[JobRow]] = []

    def __call__(self, rows: list[JobRow]) -> None:
        self.rows.append(rows)

    async def arrived(self) -> bool:
        return bool(self.rows)


@pytest.fixture
async def queue(store: Store) -> AsyncIterator[str]:
    """A queue name no other test run notifies, on a store that is listening."""
    if not store.capabilities.claim_on_notify:
        pytest.skip("store does not claim on notifications (no LISTEN connection)")
    await store.listen(lambda channel, payload: None)
    assert store.listening()
    yield f"w{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def through_proxy(store_url: str, queue: str) -> AsyncIterator[tuple[Proxy, Store]]:
    """A second, listening store on the same database, through a proxy to cut."""
    parts = urlsplit(store_url)
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    proxied = PostgresStore(urlunsplit(parts._replace(netloc=f"{parts.hostname}:{proxy.port}")))
    await proxied.listen(lambda channel, payload: None)
    try:
        yield proxy, proxied
    finally:
        await proxied.close()
        await proxy.cut()


def arm(store: Store, queue: str, taken: Taken, limit: int = 5, kinds: tuple[str, ...] = ("k",),
        server: str = "s1") -> ClaimWatch:
    watch = store.job_claim_watch(queue, list(kinds), limit, server, taken)
    assert watch is not None and watch.active
    return watch


async def test_stores_without_claim_on_notify_return_no_watch(store: Store) -> None:
    if store.capabilities.claim_on_notify:
        pytest.skip("store claims on notifications: the tests below cover it")
    assert store.job_claim_watch("q", ["k"], 5, "s1", Taken()) is None


async def test_no_watch_while_the_listen_connection_is_down(store: Store) -> None:
    if not store.capabilities.claim_on_notify:
        pytest.skip("store does not claim on notifications")
    assert not store.listening()
    assert store.job_claim_watch("q", ["k"], 5, "s1", Taken()) is None


async def test_watch_hands_over_rows_before_their_commit(
    store: Store, store_url: str, queue: str
) -> None:
    seen_by_others: list[str] = []

    def taken(rows: list[JobRow]) -> None:
        # another session still sees the job as it was: the claim has not committed
        with psycopg.connect(store_url, autocommit=True) as other:
            found = other.execute("SELECT state FROM kiln_jobs WHERE id = %s", (rows[0].id,))
            seen_by_others.append(found.fetchone()[0])  # type: ignore[index]
        rows_seen.append(rows)

    rows_seen: list[list[JobRow]] = []
    watch = store.job_claim_watch(queue, ["k"], 5, "s1", taken)
    assert watch is not None
    ids = await insert(store, job(queue=queue), job(queue=queue), job(queue=queue, kind="x"))

    async def arrived() -> bool:
        return bool(rows_seen)

    await wait_for(arrived, 3.0, "arrived()")
    assert not watch.active
    runs = await watch.close()
    [rows] = rows_seen
    assert sorted(r.id for r in rows) == ids[:2]
    assert all(r.state.value == "running" and r.server_id == "s1" and r.attempt == 1
               for r in rows)
    assert seen_by_others == ["available"]
    assert [run.claimed for run in runs] == [2] and runs[0].duration > 0
    assert [await state_of(store, i) for i in ids] == ["running", "running", "available"]


async def test_a_claim_that_takes_nothing_leaves_the_watch_armed(
    store: Store, queue: str
) -> None:
    idle, busy = Taken(), Taken()
    other_kind = arm(store, queue, idle, kinds=("other",))
    ours = arm(store, queue, busy)
    [job_id] = await insert(store, job(queue=queue))
    await wait_for(busy.arrived, 3.0, "busy.arrived()")  # both claimed in the same batch
    assert other_kind.active and not idle.rows
    await ours.close()
    runs = await other_kind.close()
    assert [run.claimed for run in runs] == [0]
    assert [r.id for r in busy.rows[0]] == [job_id]


async def test_a_closed_watch_claims_nothing(store: Store, queue: str) -> None:
    taken = Taken()
    watch = arm(store, queue, taken)
    assert await watch.close() == []
    [job_id] = await insert(store, job(queue=queue))
    await asyncio.sleep(0.1)
    assert not taken.rows and not watch.active
    assert await state_of(store, job_id) == "available"


class Held:
    """Holds kiln_jobs in SHARE mode, so a claim (an UPDATE) waits for it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    async def __aenter__(self) -> Held:
        self.conn = await psycopg.AsyncConnection.connect(self.url)
        await self.conn.execute("LOCK TABLE kiln_jobs IN SHARE MODE")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.conn is not None
        await self.conn.commit()
        await self.conn.close()

    async def notify(self, queue: str) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as c:
            await c.execute("SELECT pg_notify('kiln', %s)", (queue,))

    async def claim_waiting(self) -> None:
        async def waiting() -> bool:
            async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as c:
                cur = await c.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND application_name = 'kiln-listener' AND query LIKE '%kiln_claim%'"
                )
                row = await cur.fetchone()
                return row is not None and row[0] > 0

        await wait_for(waiting, 3.0, "waiting()")


async def test_notifications_during_a_claim_come_after_it_and_a_claim_that_took_nothing_runs_again(
    store: Store, store_url: str, queue: str
) -> None:
    """PostgreSQL delivers notifications to a session between its transactions, so
    those sent while the claim waits arrive after its commit; the watch, armed again
    by a claim that took nothing, claims on them."""
    taken = Taken()
    async with Held(store_url) as held:
        watch = arm(store, queue, taken)
        await held.notify(queue)  # no job yet: this claim will take nothing
        await held.claim_waiting()
        await held.notify(queue)
        assert watch.active
    [job_id] = await insert(store, job(queue=queue))
    await wait_for(taken.arrived, 3.0, "taken.arrived()")
    await watch.close()
    assert [r.id for r in taken.rows[0]] == [job_id]


def test_a_notification_while_the_claim_is_in_flight_says_there_may_be_more() -> None:
    claimer = Claimer(Counter())
    watch = Watch(claimer, "q", [], Taken())
    watch.notified()
    assert not watch.more  # armed: the claim it starts will see the job
    watch.sent()
    watch.notified()
    assert watch.more and watch.active
    watch.sent()  # the next claim starts over
    assert not watch.more


async def test_a_watch_closed_in_flight_rolls_the_claim_back_and_the_others_claim_again(
    store: Store, store_url: str, queue: str
) -> None:
    [job_id] = await insert(store, job(queue=queue))
    gone, stays = Taken(), Taken()
    async with Held(store_url) as held:
        closing = arm(store, queue, gone, server="s1")
        staying = arm(store, queue, stays, server="s2")
        await held.notify(queue)
        await held.claim_waiting()
        assert await closing.close(timeout=0.05) == []  # gave up waiting: closed
    await wait_for(stays.arrived, 3.0, "stays.arrived()")
    await staying.close()
    assert not gone.rows
    [[row]] = stays.rows
    assert row.id == job_id and row.server_id == "s2" and row.attempt == 1
    assert await state_of(store, job_id) == "running"


async def test_a_callback_that_raises_rolls_the_claim_back(store: Store, queue: str) -> None:
    def broken(rows: list[JobRow]) -> None:
        raise RuntimeError("a bug in the caller")

    await rolled_back(store, queue, broken)


async def rolled_back(store: Store, queue: str, on_claimed: Callable[[list[JobRow]], None]
                      ) -> int:
    """Arm a watch with ``on_claimed``, enqueue a job, and check that the claim's
    commit failed and rolled back; return the job's id."""
    watch = store.job_claim_watch(queue, ["k"], 5, "s1", on_claimed)
    assert watch is not None
    [job_id] = await insert(store, job(queue=queue))
    await wait_for(lambda: _inactive(watch), 3.0, "_inactive(watch)")
    with pytest.raises(StoreError) as caught:
        await watch.close()
    assert not isinstance(caught.value, UnreachableError)
    assert caught.value.operation == "job_claim"
    assert await state_of(store, job_id) == "available"
    return job_id


async def _more(watch: ClaimWatch) -> bool:
    return watch.more


async def _inactive(watch: ClaimWatch) -> bool:
    return not watch.active


async def test_a_backend_ended_before_the_commit_rolls_the_claim_back(
    store: Store, store_url: str, queue: str
) -> None:
    """The database's own FATAL error in place of the COMMIT's reply: it aborted the
    transaction. The listener reconnects and claims again."""
    listener = store._listener  # type: ignore[attr-defined]
    pid = listener.backend_pid

    def end_backend(rows: list[JobRow]) -> None:  # the rows are here, the COMMIT not sent
        with psycopg.connect(store_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            for _ in range(200):
                alive = admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
                if alive.fetchone() is None:
                    break
                admin.execute("SELECT pg_sleep(0.01)")

    job_id = await rolled_back(store, queue, end_backend)

    async def back() -> bool:
        return store.listening() and listener.backend_pid not in (None, pid)

    await wait_for(back, 5.0, "back()")
    taken = Taken()
    again = arm(store, queue, taken)
    await insert(store, job(queue=queue))  # the notification wakes the new connection
    await wait_for(taken.arrived, 3.0, "taken.arrived()")
    await again.close()
    assert job_id in {r.id for r in taken.rows[0]}


async def test_a_connection_lost_with_the_commit_leaves_the_claim_unknown(
    store: Store, queue: str, through_proxy: tuple[Proxy, Store]
) -> None:
    """The COMMIT never reaches the database and then the connection drops: nobody can
    say whether the claim took, so the error says unreachable (the pool lets those
    jobs run on; their results are fenced). Here it had not, and the job is back."""
    proxy, proxied = through_proxy

    def freeze(rows: list[JobRow]) -> None:
        proxy.frozen = True  # from here on nothing gets through, the COMMIT included

    watch = proxied.job_claim_watch(queue, ["k"], 5, "s1", freeze)
    assert watch is not None
    [job_id] = await insert(store, job(queue=queue))
    await wait_for(lambda: _inactive(watch), 3.0, "_inactive(watch)")
    await proxy.cut()
    with pytest.raises(UnreachableError):
        await watch.close()

    async def available_again() -> bool:
        return await state_of(store, job_id) == "available"

    # once the database noticed the connection was gone
    await wait_for(available_again, 3.0,
                   "the job available again")


async def test_a_watch_claims_as_its_listener_comes_back(
    store: Store, queue: str, through_proxy: tuple[Proxy, Store]
) -> None:
    """Notifications sent while the LISTEN connection was down are lost: the watches
    armed meanwhile claim as soon as it is back."""
    proxy, proxied = through_proxy
    taken = Taken()
    watch = arm(proxied, queue, taken)
    await proxy.cut()
    await wait_for(lambda: _down(proxied), 3.0, "_down(proxied)")
    [job_id] = await insert(store, job(queue=queue))  # its notification goes nowhere
    await proxy.restore()
    await wait_for(taken.arrived, 10.0, "taken.arrived()")
    await watch.close()
    assert [r.id for r in taken.rows[0]] == [job_id]


async def _down(store: Store) -> bool:
    return not store.listening()
