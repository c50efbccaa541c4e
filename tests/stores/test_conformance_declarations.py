"""Conformance: declarations that change between deploys.

A queue's concurrency limit lasts while a live server declares it (audit M3): the
sweep removes the others and gives each the newest live declaration's max, and an
operator removes one, audited. A kind's declaration applied to the jobs that wait
(kiln._model._adoption): keys cleared when its limit was removed (audit H3), set when
one was added or changed, key rows resized; the jobs enqueued without a declaration
found and adopted (issue 39 item 9). Every write leaves a job that no longer waits as
it is. Heartbeat ages move with the database clock (tests/stores/clock.py), not with
sleeps.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import kiln
from kiln._client._unhandled import Unhandled
from kiln._model import _adoption as bits
from kiln._model._adoption import Adoption
from kiln._model._job import JobFilter, JobState, NewJob
from kiln._model._kinds import make_kind
from kiln.stores import Store
from tests.stores.clock import Clock, clockable
from tests.stores.factories import claim, insert, job, server

DEAD_AFTER = 60.0


@pytest.fixture
def store_url(store_url: str) -> Iterator[str]:
    yield from clockable(store_url)


async def limits(store: Store) -> dict[str, int]:
    """The queue limits a claim obeys: the "queue:NAME" groups concurrency_in_use lists."""
    return {k: v for k, v in (await store.concurrency_in_use()).items()
            if k.startswith("queue:")}


async def claimed(store: Store, n: int = 10) -> int:
    return len(await store.job_claim("q", ["k"], n, "s9", limited=True, keys=False))


async def test_a_queue_limit_lasts_while_a_live_server_declares_it(
    store: Store, clock: Clock
) -> None:
    await store.server_register(server("v1"))
    await store.concurrency_declare({"queue:q": 1}, "v1")
    assert await store.concurrency_sweep(DEAD_AFTER) == []  # v1 is live: kept
    await insert(store, *[job() for _ in range(3)])
    assert await claimed(store) == 1
    await clock.advance(DEAD_AFTER + 1)  # v1 stopped heartbeating: not live any more
    assert await store.concurrency_sweep(DEAD_AFTER) == ["queue:q"]
    assert "queue:q" not in await limits(store)
    assert await claimed(store) == 2  # the claim obeys no limit now
    assert await store.concurrency_sweep(DEAD_AFTER) == []  # and the declaration is gone


async def test_a_deregistered_server_s_limit_goes_at_the_next_sweep(store: Store) -> None:
    await store.server_register(server("v1"))
    await store.concurrency_declare({"queue:q": 1, "queue:r": 2}, "v1")
    await store.server_deregister("v1")  # a graceful stop
    assert await store.concurrency_sweep(DEAD_AFTER) == ["queue:q", "queue:r"]
    assert await limits(store) == {}


async def test_the_newest_live_declaration_gives_the_max(store: Store, clock: Clock) -> None:
    await store.server_register(server("v1"))
    await store.concurrency_declare({"queue:q": 1}, "v1")
    await clock.advance(1)
    await store.server_register(server("v2"))
    await store.concurrency_declare({"queue:q": 5}, "v2")  # a deploy raises it
    await insert(store, *[job() for _ in range(6)])
    assert await store.concurrency_sweep(DEAD_AFTER) == []
    assert await claimed(store, 2) == 2  # 5 while v2 is live
    await store.server_deregister("v2")  # rolled back: only v1 declares it now
    assert await store.concurrency_sweep(DEAD_AFTER) == []
    assert await claimed(store) == 0  # max 1, and 2 run


async def test_a_kind_s_key_rows_are_not_the_sweep_s(store: Store) -> None:
    await store.concurrency_declare({"kind:k": 2, "kind:k|\"a\"": 1})  # written by enqueue
    assert await store.concurrency_sweep(DEAD_AFTER) == []
    await insert(store, *[job() for _ in range(2)])
    new = job()
    new.conc_key, new.conc_max = "kind:k", 2
    await insert(store, new)
    assert len(await store.job_claim("q", ["k"], 10, "s1", limited=True)) == 3


async def test_a_limit_declared_before_the_declarations_stays_until_declared_again(
    store: Store, clock: Clock
) -> None:
    # what migration 13 does to a limit an older kiln declared: a declaration of ''
    await store.concurrency_declare({"queue:q": 1}, "")
    await clock.advance(DEAD_AFTER * 10)
    assert await store.concurrency_sweep(DEAD_AFTER) == []  # kept: nobody knows who
    await store.server_register(server("v2"))
    await store.concurrency_declare({"queue:q": 3}, "v2")  # a server of this version
    await store.server_deregister("v2")
    assert await store.concurrency_sweep(DEAD_AFTER) == ["queue:q"]  # now it follows


async def test_an_operator_removes_a_limit_audited(store: Store) -> None:
    await store.server_register(server("v1"))
    await store.concurrency_declare({"queue:q": 1}, "v1")
    assert await store.concurrency_remove("queue:q", "alice") == (1, ["v1"])
    assert await limits(store) == {}
    assert await store.concurrency_sweep(DEAD_AFTER) == []
    assert await store.concurrency_remove("queue:q", "alice") == (None, [])
    entries = await store.audit_list(2)
    assert [(e.actor, e.action, e.count) for e in entries] == [
        ("alice", "concurrency_remove", 0), ("alice", "concurrency_remove", 1)]
    assert entries[1].detail == {"key": "queue:q", "max": 1, "declared_by": ["v1"]}


# a kind's declaration applied to the jobs that wait ---------------------------------
def keyed(key: str, conc_max: int = 1, kind: str = "k", **options: object) -> NewJob:
    new = job(kind, **options)  # type: ignore[arg-type]
    new.conc_key, new.conc_max = key, conc_max
    return new


async def conc_keys(store: Store, kind: str = "k") -> dict[int, str | None]:
    """Each waiting job's stored key, as the adopter reads it."""
    return {j.id: j.conc_key for j in await store.jobs_waiting(kind, 0, 100)}


async def test_unkey_clears_the_keys_of_available_jobs_of_the_kinds_given(store: Store) -> None:
    a, b = await insert(store, keyed("kind:k|\"t1\""), keyed("kind:k|\"t2\""))
    [late] = await insert(store, keyed("kind:k|\"t1\"", delay=3600))  # scheduled: later
    [other] = await insert(store, keyed("kind:k2", kind="k2"))
    [plain] = await insert(store, job())
    assert await store.jobs_unkey(["k"]) == {"q": 2}
    assert (await conc_keys(store))[a] is None and (await conc_keys(store))[b] is None
    assert (await conc_keys(store))[late] == "kind:k|\"t1\""
    assert (await conc_keys(store, "k2"))[other] == "kind:k2"
    assert {r.id for r in await claim(store)} == {a, b, plain}  # the plain claim takes them
    assert await store.jobs_unkey(["k"]) == {}


async def test_unkey_leaves_a_running_job_s_key(store: Store) -> None:
    await insert(store, keyed("kind:k"))
    assert len(await store.job_claim("q", ["k"], 1, "s1", limited=True)) == 1
    assert await store.jobs_unkey(["k"]) == {}
    assert (await store.concurrency_in_use())["kind:k"] == 1  # still counted under it


async def test_resize_sets_the_max_of_every_key_row_of_a_kind(store: Store) -> None:
    await insert(store, keyed("kind:k|\"a\""), keyed("kind:k|\"b\""), keyed("kind:k"),
                 keyed("kind:kx|\"a\"", kind="kx"))
    assert await store.concurrency_resize({"k": 3}) == 3
    assert await store.concurrency_resize({"k": 3}) == 0  # a row that holds it: unwritten
    rows = await store.job_claim("q", ["k", "kx"], 20, "s1", limited=True)
    assert len(rows) == 4  # one each: room for more, but one job per key
    await insert(store, *[keyed("kind:k|\"a\"", conc_max=3) for _ in range(3)])
    more = await store.job_claim("q", ["k"], 20, "s1", limited=True)
    assert len(more) == 2  # "a" runs 1 of 3: two more


async def test_waiting_walks_a_kind_s_waiting_jobs_in_id_order(store: Store) -> None:
    ids = await insert(store, *[job() for _ in range(5)], job("other"))
    await insert(store, job(unique_key="u" * 40, unique_states=8))  # unique: left out
    [taken] = await claim(store, limit=1)
    first = await store.jobs_waiting("k", 0, 2)
    assert [j.id for j in first] == [i for i in ids[:5] if i != taken.id][:2]
    rest = await store.jobs_waiting("k", first[-1].id, 10)
    assert [j.id for j in first + rest] == [i for i in ids[:5] if i != taken.id]
    assert first[0].args == {"n": 1} and first[0].defaulted == 0


async def test_rekey_sets_keys_and_declares_their_rows(store: Store) -> None:
    [running] = await insert(store, job(args={"t": 0}))
    await claim(store)  # it runs: a rekey leaves it
    fresh = await insert(store, job(args={"t": 1}), job(args={"t": 2}))
    keys = {fresh[0]: "kind:k|1", fresh[1]: "kind:k|2", running: "kind:k|0"}
    assert await store.jobs_rekey(keys, {"kind:k|0": 1, "kind:k|1": 1, "kind:k|2": 1}) == 2
    assert await conc_keys(store) == {fresh[0]: "kind:k|1", fresh[1]: "kind:k|2"}
    assert await store.job_claim("q", ["k"], 10, "s1") == []  # no longer plain jobs
    assert len(await store.job_claim("q", ["k"], 10, "s1", limited=True)) == 2


UNDECLARED = bits.defaulted({})  # every option from the defaults


async def test_undeclared_finds_the_waiting_jobs_enqueued_without_a_declaration(
    store: Store,
) -> None:
    ids = await insert(store, job(defaulted=UNDECLARED), job(), job(defaulted=UNDECLARED),
                       job("other", defaulted=UNDECLARED))
    found = await store.jobs_undeclared(["k"], 10)
    assert [(j.id, j.defaulted) for j in found] == [(ids[0], UNDECLARED), (ids[2], UNDECLARED)]
    assert [j.id for j in await store.jobs_undeclared(["k", "other"], 2)] == [ids[0], ids[2]]
    await claim(store, limit=1)  # ids[0] runs: no longer waiting
    assert [j.id for j in await store.jobs_undeclared(["k"], 10)] == [ids[2]]


def adoption(ids: list[int], **changes: object) -> Adoption:
    fields: dict[str, object] = dict(
        kind="k", ids=tuple(ids), queue="mail", max_attempts=2, priority=-1, timeout=30.0,
        tags=("billing",), rate_key=None, keys={}, conc_max=0,
    )
    fields.update(changes)
    return Adoption(**fields)  # type: ignore[arg-type]


async def test_adopt_gives_the_defaulted_options_the_declaration_s_values(store: Store) -> None:
    given = UNDECLARED & ~bits.MAX_ATTEMPTS & ~bits.QUEUE  # the producer gave those two
    ids = await insert(
        store, job(queue="default", defaulted=UNDECLARED),
        job(queue="mine", max_attempts=9, defaulted=given),
        job(queue="default", delay=3600, defaulted=UNDECLARED), job(queue="default"),
    )
    assert await store.jobs_adopt(adoption(ids)) == {"mail": 1, "mine": 1}  # available now
    rows = {r.id: r for r in await store.job_list(JobFilter(ids=tuple(ids)), limit=10)}
    first = rows[ids[0]]
    assert (first.queue, first.max_attempts, first.priority, first.timeout, first.tags) == (
        "mail", 2, -1, 30.0, ["billing"])
    assert (rows[ids[1]].queue, rows[ids[1]].max_attempts) == ("mine", 9)
    assert rows[ids[1]].priority == -1
    assert (rows[ids[2]].queue, rows[ids[2]].state) == ("mail", JobState.SCHEDULED)
    assert (rows[ids[3]].queue, rows[ids[3]].max_attempts) == ("default", 25)  # declared
    assert await store.jobs_undeclared(["k"], 10) == []
    assert await store.jobs_adopt(adoption(ids)) == {}  # adopted once


async def test_adopt_makes_a_rate_limited_kind_s_jobs_pending(store: Store) -> None:
    ids = await insert(store, job(defaulted=UNDECLARED), job(delay=3600, defaulted=UNDECLARED),
                       job(defaulted=UNDECLARED & ~bits.RATE))  # gave its own rate: none
    assert await store.jobs_adopt(adoption(ids, rate_key="stripe")) == {"mail": 1}
    rows = {r.id: r for r in await store.job_list(JobFilter(ids=tuple(ids)), limit=10)}
    assert [(rows[i].state, rows[i].rate_key) for i in ids] == [
        (JobState.PENDING, "stripe"), (JobState.PENDING, "stripe"), (JobState.AVAILABLE, None)]


async def test_adopt_gives_a_limited_kind_s_jobs_their_keys(store: Store) -> None:
    ids = await insert(store, job(defaulted=UNDECLARED), job(defaulted=UNDECLARED),
                       job(defaulted=UNDECLARED))
    keys = {ids[0]: "kind:k|1", ids[1]: "kind:k|1"}  # ids[2]'s args gave no key
    await store.jobs_adopt(adoption(ids, keys=keys, conc_max=1))
    assert await conc_keys(store) == {ids[0]: "kind:k|1", ids[1]: "kind:k|1", ids[2]: None}
    rows = await store.job_claim("mail", ["k"], 10, "s1", limited=True)
    assert sorted(r.id for r in rows) == [ids[0], ids[2]]  # one of key 1, and the plain one


async def test_adopt_leaves_a_job_that_no_longer_waits(store: Store) -> None:
    ids = await insert(store, job(defaulted=UNDECLARED))
    [row] = await claim(store)
    assert await store.jobs_adopt(adoption(ids)) == {}
    got = await store.job_get(row.id)
    assert got is not None and (got.queue, got.state) == ("q", JobState.RUNNING)


# jobs no live server can claim (issue 39 item 9) -------------------------------------
async def test_available_jobs_are_counted_by_queue_and_kind(store: Store) -> None:
    await insert(store, job("a"), job("a"), job("b"), job("a", queue="r"),
                 keyed("kind:a", kind="a"), job("a", delay=3600))
    assert sorted(await store.jobs_available_by_kind()) == [
        ("q", "a", 3), ("q", "b", 1), ("r", "a", 1)]


async def test_unhandled_jobs_are_those_no_live_server_handles_in_their_queue(
    store: Store, clock: Clock
) -> None:
    client = kiln.Client(store)
    await store.server_register(server("w1", {"mail": 2}))  # kinds ["k"]
    await store.kinds_publish("w1", "h", 1, [make_kind("k", print).declaration()])
    await insert(store, job(queue="mail"), job(queue="default"), job("typo", queue="mail"))
    await store.queue_pause("mail", "test")  # paused on purpose: still handled
    assert await client.unhandled() == [
        Unhandled(queue="default", kind="k", jobs=1, declared=True),
        Unhandled(queue="mail", kind="typo", jobs=1, declared=False),
    ]
    await clock.advance(61)  # w1's heartbeat is older than dead_after: nobody handles them
    assert [(u.queue, u.kind, u.jobs) for u in await client.unhandled()] == [
        ("default", "k", 1), ("mail", "k", 1), ("mail", "typo", 1)]
    assert len(await client.unhandled(dead_after=120)) == 2  # live by a longer dead_after
