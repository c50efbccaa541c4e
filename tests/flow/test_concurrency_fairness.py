"""Property: fairness across keys is bounded over successive claims (issue 40, the
decision on item 4), on every store.

The bound docs/guide.md states ("Fairness"): a claim serves the ``limit`` least recently
served keys that have an available job and a free slot; so of K such keys, none waits
more than ceil(K / limit) - 1 claims in a row while it has an available job and a free
slot. Against the real stores, one claimer: random keys with random backlogs and maxes,
a random claim size; after each claim its jobs complete (the slots free again), and the
claims that passed each waiting key by are counted.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln._model._job import JobResult, NewJob, Outcome
from kiln.stores import Store, store_from_url
from tests.support.stores import migrate


@dataclass(frozen=True)
class Scenario:
    backlogs: list[int]  # jobs per key
    maxes: list[int]  # per key
    limit: int  # jobs a claim asks for


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    keys = draw(st.integers(2, 14))
    return Scenario(
        backlogs=draw(st.lists(st.integers(1, 6), min_size=keys, max_size=keys)),
        maxes=draw(st.lists(st.integers(1, 1000), min_size=keys, max_size=keys)),
        limit=draw(st.integers(1, 8)),
    )


def passed_by(waiting: set[str], served: set[str], missed: dict[str, int]) -> int:
    """Count one more claim that passed each waiting key by (0 for those it served);
    returns the longest run of claims any waiting key has been passed by."""
    for key in waiting:
        missed[key] = 0 if key in served else missed.get(key, 0) + 1
    return max((missed[k] for k in waiting), default=0)


def test_the_witness_can_fail() -> None:
    missed: dict[str, int] = {}
    assert passed_by({"a", "b"}, {"a"}, missed) == 1
    assert passed_by({"a", "b"}, {"a"}, missed) == 2  # b passed by twice in a row
    assert passed_by({"a", "b"}, {"b"}, missed) == 1


@settings(max_examples=6, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(s=scenarios())
def test_no_key_waits_more_than_the_bound(store_url: str, s: Scenario) -> None:
    asyncio.run(_migrated_then(store_url, s))


async def _migrated_then(url: str, s: Scenario) -> None:
    await migrate(url)
    store = store_from_url(url)
    await store.open()
    try:
        await _run(store, s)
    finally:
        await store.close()


async def _run(store: Store, s: Scenario) -> None:
    tag = uuid.uuid4().hex[:8]
    queue = f"f{tag}"
    keys = [f"kind:k{tag}|{n}" for n in range(len(s.backlogs))]
    jobs = []
    for key, backlog, most in zip(keys, s.backlogs, s.maxes, strict=True):
        for i in range(backlog):
            job = NewJob(kind="k", args={"i": i}, queue=queue)
            job.conc_key, job.conc_max = key, most
            jobs.append(job)
    key_of = dict(zip(await store.job_insert_many(jobs), (j.conc_key for j in jobs),
                      strict=True))
    left = dict(zip(keys, s.backlogs, strict=True))
    bound = math.ceil(len(keys) / s.limit) - 1
    missed: dict[str, int] = {}
    worst = 0
    for _ in range(sum(s.backlogs) + 1):
        waiting = {k for k, n in left.items() if n}
        if not waiting:
            break
        rows = await store.job_claim(queue, ["k"], s.limit, "s1", limited=True)
        assert rows, (left, s)  # every waiting key has a free slot: a claim takes something
        served = {str(key_of[r.id]) for r in rows}
        worst = max(worst, passed_by(waiting, served, missed))
        assert worst <= bound, (worst, bound, missed, s)
        for r in rows:
            left[str(key_of[r.id])] -= 1
        applied = await store.job_results_apply([JobResult(
            job_id=r.id, server_id="s1", attempt=r.attempt, outcome=Outcome.COMPLETED,
            claimed_at=r.attempted_at) for r in rows])
        assert applied.applied == len(rows)
    assert not any(left.values()), left
