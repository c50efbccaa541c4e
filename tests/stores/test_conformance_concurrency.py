"""Conformance: global concurrency limits (kiln._model._concurrency) enforced in the claim."""

from __future__ import annotations

import asyncio

from kiln._model._job import JobRow, JobState, NewJob, Outcome
from kiln.stores import Store
from tests.stores.factories import complete, insert, job, result, server


def limited(key: str = "kind:k", conc_max: int = 2, **options: object) -> NewJob:
    new = job(**options)  # type: ignore[arg-type]
    new.conc_key, new.conc_max = key, conc_max
    return new


async def take(store: Store, limit: int = 10, server: str = "s1", queue: str = "q",
               kinds: tuple[str, ...] = ("k",), keys: bool = True) -> list[JobRow]:
    return await store.job_claim(queue, list(kinds), limit, server, limited=True, keys=keys)


async def running(store: Store, key: str) -> int:
    return (await store.concurrency_in_use()).get(key.split("|")[0], 0)


async def test_the_claim_takes_at_most_max_of_a_key(store: Store) -> None:
    await insert(store, *[limited() for _ in range(5)], job(priority=1))
    first = await take(store)
    assert len(first) == 3  # two of the key, and the plain job
    assert await take(store) == []  # the key is full
    assert await running(store, "kind:k") == 2
    await complete(store, first[0])
    again = await take(store)
    assert len(again) == 1  # the freed slot, and only it


async def test_the_plain_claim_never_takes_limited_jobs(store: Store) -> None:
    await insert(store, *[limited() for _ in range(3)], job(args={"plain": True}))
    rows = await store.job_claim("q", ["k"], 10, "s1")
    assert [r.args for r in rows] == [{"plain": True}]
    assert len(await take(store)) == 2


async def test_keys_are_served_fairly(store: Store) -> None:
    hot = [limited("kind:k|hot", 10, args={"t": "hot"}) for _ in range(20)]
    await insert(store, *hot)
    await insert(store, limited("kind:k|a", 10, args={"t": "a"}),
                 limited("kind:k|b", 10, args={"t": "b"}))
    rows = await take(store, limit=3)
    assert sorted(r.args["t"] for r in rows) == ["a", "b", "hot"]  # one of each key first
    rows = await take(store, limit=2)
    assert [r.args["t"] for r in rows] == ["hot", "hot"]


async def test_a_claim_fills_its_limit_from_keys_of_uneven_backlogs(store: Store) -> None:
    # three keys: a has one job, b and c ten each (b may run six), and two plain jobs.
    # A claim of 12 takes one of every key per round until it has 12: the key with
    # one job does not make it stop short, nor does it take past b's max.
    await insert(store, limited("kind:k|a", 10, args={"t": "a"}),
                 *[limited("kind:k|b", 6, args={"t": "b"}) for _ in range(10)],
                 *[limited("kind:k|c", 10, args={"t": "c"}) for _ in range(10)],
                 job(args={"t": "plain"}), job(args={"t": "plain"}))
    rows = await take(store, limit=12)
    got = [r.args["t"] for r in rows]
    assert len(got) == 12
    assert (got.count("a"), got.count("plain")) == (1, 2)
    assert sorted((got.count("b"), got.count("c"))) == [4, 5]  # rounds 1-4, then one more
    more = [r.args["t"] for r in await take(store, limit=12)]
    # what is left: b up to its max of 6, the rest of c; nothing of a or plain
    assert (got + more).count("b") == 6
    assert (got + more).count("c") == 10
    assert len(more) == 7


async def test_the_least_recently_served_key_goes_first(store: Store) -> None:
    await insert(store, *[limited("kind:k|a", 10, args={"t": "a"}) for _ in range(3)])
    assert [r.args["t"] for r in await take(store, limit=1)] == ["a"]
    await insert(store, *[limited("kind:k|b", 10, args={"t": "b"}) for _ in range(3)])
    # a was served just now; b never was: b's job comes first when only one fits
    assert [r.args["t"] for r in await take(store, limit=1)] == ["b"]
    assert [r.args["t"] for r in await take(store, limit=1)] == ["a"]


async def test_every_way_out_of_running_frees_the_slot(store: Store) -> None:
    await insert(store, *[limited(conc_max=1) for _ in range(7)])
    for outcome in (Outcome.COMPLETED, Outcome.FAILED, Outcome.RETRY, Outcome.CANCELLED,
                    Outcome.SNOOZED, Outcome.HANDED_BACK):
        (row,) = await take(store)
        assert await take(store) == [], outcome
        error = "x" if outcome in (Outcome.FAILED, Outcome.RETRY) else None
        applied = await store.job_results_apply([result(row, outcome, error=error)])
        assert applied.applied == 1
        assert await running(store, "kind:k") == 0, outcome
    assert len(await take(store)) == 1


async def test_a_cancelled_attempt_holds_its_slot_until_it_ends(store: Store) -> None:
    # issue 39 item 4: a cancel does not stop a handler at once (a plain def finishes its
    # step, an async one cleans up), so the slot stays taken until the attempt's
    # (fenced-off) result says the handler has ended
    from kiln._client._filters import filter_of

    await store.server_register(server("s1"))
    await insert(store, *[limited(conc_max=1) for _ in range(2)])
    (row,) = await take(store)
    assert await take(store) == []
    assert await store.jobs_cancel(filter_of(ids=[row.id]), "alice") == 1
    assert await take(store) == []  # its handler may still run
    assert await store.jobs_ending_release(60.0) == 0  # its server is alive
    assert (await store.job_results_apply([result(row, Outcome.CANCELLED)])).applied == 0
    (other,) = await take(store)
    assert other.id != row.id


async def test_a_cancelled_attempt_holds_a_queue_slot_until_it_ends(store: Store) -> None:
    from kiln._client._filters import filter_of

    await store.server_register(server("s1"))
    await store.concurrency_declare({"queue:q": 1})
    await insert(store, job(), job())
    (row,) = await take(store, keys=False)
    assert await store.jobs_cancel(filter_of(ids=[row.id]), "alice") == 1
    assert await take(store, keys=False) == []
    assert await take(store) == []  # the claim with keys counts it too
    await store.job_results_apply([result(row, Outcome.CANCELLED)])
    assert len(await take(store, keys=False)) == 1


async def test_a_cancelled_attempt_of_a_dead_server_frees_its_slot(store: Store) -> None:
    # its handler went with its server: the rescuer ends the attempt (jobs_ending_release)
    from kiln._client._filters import filter_of

    await store.server_register(server("s1"))
    await insert(store, *[limited(conc_max=1) for _ in range(2)])
    (row,) = await take(store)
    await store.jobs_cancel(filter_of(ids=[row.id]), "alice")
    assert await take(store) == []
    await asyncio.sleep(0.05)
    assert await store.jobs_ending_release(0.01) == 1  # s1 silent for longer than that
    assert await store.jobs_ending_release(0.01) == 0
    (other,) = await take(store)
    assert other.id != row.id
    gone = await store.job_get(row.id)
    assert gone is not None and gone.state is JobState.CANCELLED


async def test_a_rescue_frees_the_slot(store: Store) -> None:
    await insert(store, *[limited(conc_max=1) for _ in range(2)])
    (row,) = await take(store, server="dead")
    assert await take(store) == []
    await store.job_results_apply([result(row, Outcome.RETRY, server="dead", rescued=True)])
    assert len(await take(store)) == 1


async def test_a_queue_limit_holds_for_every_job_of_the_queue(store: Store) -> None:
    await store.concurrency_declare({"queue:q": 2})
    await insert(store, job(), job(), job(), limited(conc_max=5))
    assert await store.job_claim("q", ["k"], 10, "s1") == []  # the plain claim stays out
    rows = await take(store)
    assert len(rows) == 2
    assert await take(store) == []
    assert (await store.concurrency_in_use())["queue:q"] == 2
    await complete(store, rows[0])
    assert len(await take(store)) == 1


async def test_a_queue_limit_holds_for_a_claim_without_keys(store: Store) -> None:
    # keys=False: a pool none of whose kinds has a limit of its own; only the queue's
    # limit counts, and jobs with a key are left alone, as the plain claim leaves them
    await store.concurrency_declare({"queue:q": 3})
    await insert(store, limited(conc_max=5, args={"keyed": True}),
                 *[job(priority=p) for p in (3, 1, 2, 0)])
    rows = await take(store, limit=2, keys=False)
    assert [r.priority for r in rows] == [0, 1]  # the plain claim's order
    assert [r.priority for r in await take(store, keys=False)] == [2]  # one slot left
    assert await take(store, keys=False) == []  # full
    assert (await store.concurrency_in_use())["queue:q"] == 3
    await complete(store, rows[0])
    assert [r.priority for r in await take(store, keys=False)] == [3]
    await complete(store, rows[1])
    assert await take(store, keys=False) == []  # only the keyed job waits: left alone
    assert len(await take(store)) == 1  # a claim with keys takes it, within both limits


async def test_a_claim_without_keys_counts_every_running_job_of_the_queue(
    store: Store,
) -> None:
    # running jobs with a key count against the queue's limit all the same
    await store.concurrency_declare({"queue:q": 2})
    await insert(store, limited(conc_max=5), limited(conc_max=5))
    assert len(await take(store)) == 2
    await insert(store, job())
    assert await take(store, keys=False) == []


async def test_a_claim_without_keys_takes_nothing_from_a_paused_queue(store: Store) -> None:
    await store.concurrency_declare({"queue:q": 5})
    await insert(store, job(), job())
    await store.queue_pause("q", actor="test")
    assert await take(store, keys=False) == []
    await store.queue_resume("q", actor="test")
    assert len(await take(store, keys=False)) == 2


async def test_a_claim_without_keys_in_a_queue_without_a_limit(store: Store) -> None:
    # the queue's limit may be gone (or never declared here): plain jobs, up to limit
    await insert(store, limited(conc_max=5, args={"keyed": True}), job(), job(), job())
    rows = await take(store, keys=False)
    assert len(rows) == 3 and all("keyed" not in r.args for r in rows)


async def test_a_key_s_max_follows_its_declaration(store: Store) -> None:
    await insert(store, *[limited(conc_max=1) for _ in range(3)])
    assert len(await take(store)) == 1
    await insert(store, limited(conc_max=3))  # the kind's limit was raised
    assert len(await take(store)) == 2


async def test_concurrent_claims_without_keys_never_exceed_a_queue_s_max(
    store: Store, other_store: Store
) -> None:
    await store.concurrency_declare({"queue:q": 3})
    await insert(store, *[job() for _ in range(30)])

    async def claims(s: Store, server: str) -> list[JobRow]:
        got: list[JobRow] = []
        for _ in range(5):
            got += await take(s, limit=3, server=server, keys=False)
        return got

    a, b = await asyncio.gather(claims(store, "s1"), claims(other_store, "s2"))
    assert len(a) + len(b) == 3
    assert (await store.concurrency_in_use())["queue:q"] == 3


async def test_concurrent_claims_never_exceed_max(store: Store, other_store: Store) -> None:
    await insert(store, *[limited(conc_max=3) for _ in range(30)])

    async def claims(s: Store, server: str) -> list[JobRow]:
        got: list[JobRow] = []
        for _ in range(5):
            got += await take(s, limit=3, server=server)
        return got

    a, b = await asyncio.gather(claims(store, "s1"), claims(other_store, "s2"))
    assert len(a) + len(b) == 3
    assert await running(store, "kind:k") == 3
    states = {r.id: r.state for r in a + b}
    assert set(states.values()) == {JobState.RUNNING}


async def test_a_claim_takes_keys_round_by_round_whatever_their_backlogs(store: Store) -> None:
    # Backlogs of every shape (keys with fewer jobs than a round, with a max below
    # their backlog, plain jobs), claims of every size: a claim takes each key's first
    # jobs in order, never past its max, fills its limit while jobs remain, and takes
    # round by round (no key, nor the plain jobs, gets two more than another that still
    # has some). The stores read a first round of ceil(limit / keys) of each key and a
    # second one past it when short (SQLite: above 64 jobs; up to that it walks every
    # key one job at a time in one statement): a second round that skipped or repeated
    # jobs, or was missing, or a walk past a key's free slots, breaks one of these.
    import random

    rnd = random.Random(40)
    for case in range(16):
        queue = f"fair{case}"
        big = case >= 12  # claims past SQLite's WALKED, which it makes another way
        backlog = {f"kind:k|{case}-{i}": (rnd.randint(0, 60 if big else 12),
                                          rnd.randint(1, 50 if big else 10))
                   for i in range(rnd.randint(1, 6))}
        plain = rnd.randint(0, 30 if big else 5)
        news = [limited(key, most, queue=queue, args={"t": key})
                for key, (n, most) in backlog.items() for _ in range(n)]
        news += [job(queue=queue, args={"t": "plain"}) for _ in range(plain)]
        rnd.shuffle(news)
        ids = await insert(store, *news)
        order = {t: sorted(i for i, n in zip(ids, news, strict=True) if n.args["t"] == t)
                 for t in [*backlog, "plain"]}
        room = rnd.randint(65, 120) if big else rnd.randint(1, 20)
        rows = await take(store, limit=room, queue=queue)
        got = {t: sorted(r.id for r in rows if r.args["t"] == t) for t in order}
        eligible = {t: min(n, most) for t, (n, most) in backlog.items()} | {"plain": plain}
        assert len(rows) == min(room, sum(eligible.values())), (case, backlog, plain, room)
        for t, taken in got.items():
            assert taken == order[t][:len(taken)], (case, t)  # its first jobs, in order
            assert len(taken) <= eligible[t], (case, t)
        for t, taken in got.items():
            if len(taken) < eligible[t]:  # t had more: no lane is two rounds ahead of it
                assert all(len(other) <= len(taken) + 1 for other in got.values()), (
                    case, backlog, plain, room, {k: len(v) for k, v in got.items()})
