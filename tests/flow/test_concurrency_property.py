"""Property: never more than ``max`` jobs of a concurrency key run at once, fleet-wide.

Against the real stores: several claimers, each with its own store (so its own
connections, as separate servers have), claim limited and plain jobs with random
batch sizes; every job runs for a random time; now and then a claimer is killed: its
handlers stop and its running jobs are rescued (a rescuer's retry result), as the
leader would after dead_after. Two witnesses check the limit: the handlers, which
count themselves per key as they start and end, and samples of the running jobs by key
group read from the database while the fleet runs.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import Counter
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln._model._job import JobResult, JobRow, NewJob, Outcome
from kiln.stores import Store, store_from_url
from tests.support.stores import migrate

TICK = 0.002  # seconds; job durations are whole ticks


@dataclass(frozen=True)
class Scenario:
    maxes: tuple[int, int, int]  # kind a (one key), kind b: tenants x and y
    queue_max: int  # the limit of the second queue, whose jobs have no key
    jobs: list[tuple[int, int]]  # (which key 0..3, duration in ticks); 3: the limited queue
    claimers: int
    batch: int
    kills: list[int]  # after how many claims in all a claimer is killed


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    return Scenario(
        maxes=(draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 4))),
        queue_max=draw(st.integers(1, 3)),
        jobs=draw(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10)),
                           min_size=10, max_size=40)),
        claimers=draw(st.integers(2, 3)),
        batch=draw(st.integers(1, 5)),
        kills=draw(st.lists(st.integers(1, 30), max_size=2)),
    )


@dataclass
class Fleet:
    keys: list[str]
    maxes: dict[str, int]
    running: Counter[str] = field(default_factory=Counter)  # by key, as handlers count
    over: list[tuple[str, int]] = field(default_factory=list)
    sampled_over: list[tuple[str, int]] = field(default_factory=list)
    claims: int = 0
    finished: int = 0


def _key_of(row: JobRow, fleet: Fleet) -> str:
    return fleet.keys[int(row.args["key"])]


def _enter(fleet: Fleet, key: str) -> None:
    fleet.running[key] += 1
    if fleet.running[key] > fleet.maxes[key]:
        fleet.over.append((key, fleet.running[key]))


async def _handler(row: JobRow, fleet: Fleet, ticks: int, done: list[JobRow]) -> None:
    key = _key_of(row, fleet)
    _enter(fleet, key)
    try:
        await asyncio.sleep(ticks * TICK)
    finally:
        fleet.running[key] -= 1
    done.append(row)  # its result: written by the claimer, as a server's completer does


async def _flush(store: Store, done: list[JobRow], fleet: Fleet) -> None:
    if done:
        results = [JobResult(r.id, r.server_id or "", r.attempt, Outcome.COMPLETED)
                   for r in done]
        done.clear()
        applied = (await store.job_results_apply(results)).applied
        fleet.finished += applied  # after the await: other claimers add meanwhile


async def _claimer(store: Store, name: str, queues: list[str], s: Scenario, fleet: Fleet,
                   total: int, killed: asyncio.Event) -> None:
    """Claims until every job finished; on ``killed``: its handlers stop, then its jobs
    are rescued (the order a fenced server and the leader's rescuer guarantee)."""
    tasks: dict[asyncio.Task[None], JobRow] = {}
    done: list[JobRow] = []
    generation = 0
    while fleet.finished < total:
        if killed.is_set():
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await _flush(store, done, fleet)
            rescued = [JobResult(r.id, r.server_id or "", r.attempt, Outcome.RETRY,
                                 rescued=True) for t, r in tasks.items() if t.cancelled()]
            await store.job_results_apply(rescued)
            tasks.clear()
            killed.clear()
            generation += 1  # a new server takes its place
        server = f"{name}-{generation}"
        for queue in queues:
            rows = await store.job_claim(queue, ["k"], s.batch, server, limited=True)
            fleet.claims += 1
            for row in rows:
                ticks = int(row.args["ticks"])
                tasks[asyncio.create_task(_handler(row, fleet, ticks, done))] = row
        await _flush(store, done, fleet)
        for task in [t for t in tasks if t.done()]:
            del tasks[task]
        await asyncio.sleep(TICK)
    await asyncio.gather(*tasks, return_exceptions=True)


async def _sample(store: Store, fleet: Fleet, total: int, groups: dict[str, int]) -> None:
    while fleet.finished < total:
        for group, n in (await store.concurrency_in_use()).items():
            if group in groups and n > groups[group]:
                fleet.sampled_over.append((group, n))
        await asyncio.sleep(TICK * 2)


async def _run(url: str, s: Scenario) -> None:
    tag = uuid.uuid4().hex[:8]
    kinds = (f"kind:a{tag}", f"kind:b{tag}")
    keys = [kinds[0], f"{kinds[1]}|\"x\"", f"{kinds[1]}|\"y\"", f"queue:l{tag}"]
    fleet = Fleet(keys=keys, maxes=dict(zip(keys, (*s.maxes, s.queue_max), strict=True)))
    queues = [f"q{tag}", f"l{tag}"]
    stores = [store_from_url(url) for _ in range(s.claimers + 1)]
    for store in stores:
        await store.open()
    try:
        admin = stores[-1]
        await admin.concurrency_declare({keys[3]: s.queue_max})
        jobs = []
        for key, ticks in s.jobs:
            job = NewJob(kind="k", args={"key": key, "ticks": ticks},
                         queue=queues[1] if key == 3 else queues[0])
            if key < 3:
                job.conc_key, job.conc_max = keys[key], s.maxes[key]
            jobs.append(job)
        random.Random(len(jobs)).shuffle(jobs)
        await admin.job_insert_many(jobs)
        kills = [asyncio.Event() for _ in range(s.claimers)]
        claimers = [asyncio.create_task(_claimer(store, f"s{n}", queues, s, fleet, len(jobs),
                                                 kills[n]))
                    for n, store in enumerate(stores[:-1])]
        groups = {kinds[0]: s.maxes[0], kinds[1]: s.maxes[1] + s.maxes[2],
                  keys[3]: s.queue_max}
        sampler = asyncio.create_task(_sample(admin, fleet, len(jobs), groups))
        for n, after in enumerate(s.kills):
            while fleet.claims < after and fleet.finished < len(jobs):
                await asyncio.sleep(TICK)
            kills[n % s.claimers].set()
        async with asyncio.timeout(60):
            await asyncio.gather(*claimers, sampler)
    finally:
        for store in stores:
            await store.close()
    assert fleet.over == [], (s, fleet.over)
    assert fleet.sampled_over == [], (s, fleet.sampled_over)
    assert fleet.finished == len(s.jobs)


def test_the_witnesses_can_fail() -> None:
    """A handler count over max is recorded (the check itself can fail)."""
    fleet = Fleet(keys=["k"], maxes={"k": 1})
    _enter(fleet, "k")
    assert fleet.over == []
    _enter(fleet, "k")
    assert fleet.over == [("k", 2)]


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(s=scenarios())
def test_never_more_than_max_running_per_key(store_url: str, s: Scenario) -> None:
    asyncio.run(_migrated_then(store_url, s))


async def _migrated_then(url: str, s: Scenario) -> None:
    await migrate(url)
    await _run(url, s)
