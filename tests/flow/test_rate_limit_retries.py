"""Property: with retries and snoozes going back through admission, no window of length
``per`` admits more than rate + burst starts of a key.

Against the real stores: random limits, one admitter and a worker that claims what is
admitted and answers each attempt with a retry, a snooze or a completion. A retried
job's admitted_at is overwritten when it is admitted again, so every admission is read
right after the pass that made it (one admitter: nothing else admits in between). Two
checks: every start (claim) had an admission of its own, and no window of admissions
is crowded. (Two admitters at once are the other property's business.)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln import JobFilter, NewJob, Outcome, RateLimit
from kiln._model._job import JobResult
from kiln.stores import Store, store_from_url
from tests.support.flow import TICK, crowded_windows
from tests.support.stores import migrate

Admissions = set[tuple[int, float]]  # (job id, admitted_at)


@dataclass(frozen=True)
class Scenario:
    limit: RateLimit
    jobs: int
    answers: list[Outcome]  # the worker's answers to successive attempts, in a cycle
    gap: float  # between one admitter's passes


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    per = draw(st.integers(10, 25)) * TICK
    answers = draw(st.lists(
        st.sampled_from([Outcome.RETRY, Outcome.RETRY, Outcome.SNOOZED, Outcome.COMPLETED]),
        min_size=2, max_size=6,
    ).filter(lambda a: Outcome.COMPLETED not in a[:1]))
    return Scenario(
        limit=RateLimit(rate=draw(st.integers(1, 4)), per=per, burst=draw(st.integers(0, 3))),
        jobs=draw(st.integers(2, 6)), answers=answers,
        gap=draw(st.integers(0, 3)) * TICK,
    )


async def _admit(store: Store, key: str, s: Scenario, until: float, seen: Admissions) -> None:
    while time.monotonic() < until:
        admitted = (await store.jobs_admit(key, 50)).admitted
        if admitted:
            rows = await store.job_list(JobFilter(ids=tuple(a.job_id for a in admitted)))
            seen.update((r.id, r.admitted_at.timestamp()) for r in rows if r.admitted_at)
        await asyncio.sleep(s.gap)


async def _work(store: Store, queue: str, s: Scenario, until: float) -> tuple[int, int]:
    """Claim and answer attempts until ``until``; returns how many started and how many
    went back (retried or snoozed)."""
    answered = back = 0
    while time.monotonic() < until:
        results = []
        for row in await store.job_claim(queue, ["limited"], 10, "w"):
            outcome = s.answers[answered % len(s.answers)]
            answered += 1
            if outcome is Outcome.RETRY and row.attempt >= row.max_attempts:
                outcome = Outcome.COMPLETED
            back += outcome is not Outcome.COMPLETED
            results.append(JobResult(job_id=row.id, server_id="w", attempt=row.attempt,
                                     outcome=outcome))
        if results:
            await store.job_results_apply(results)
        await asyncio.sleep(TICK)
    return answered, back


async def _run(url: str, s: Scenario) -> None:
    key = f"k{uuid.uuid4().hex[:10]}"
    # a queue of this run's own: jobs an earlier example admitted but did not start are
    # still available in the shared database, and claiming one would count a start that
    # has no admission here
    queue = key
    stores = [store_from_url(url) for _ in range(2)]
    for store in stores:
        await store.open()
    seen: Admissions = set()
    try:
        job = NewJob(kind="limited", args={}, queue=queue, rate_key=key, rate_limit=s.limit,
                     max_attempts=3)
        await stores[0].job_insert_many([job] * s.jobs)
        until = time.monotonic() + 6 * s.limit.per + 0.3
        admitting = asyncio.create_task(_admit(stores[1], key, s, until, seen))
        started, back = await _work(stores[0], queue, s, until)
        await admitting
    finally:
        for store in stores:
            await store.close()
    assert back > 0, "no attempt went back: the scenario tested nothing"
    assert started <= len(seen), f"{started} starts for {len(seen)} admissions"
    assert crowded_windows([t for _id, t in seen], s.limit) == [], (s, sorted(seen))


@settings(max_examples=5, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(s=scenarios())
def test_no_window_admits_more_than_rate_plus_burst_with_retries(
    store_url: str, s: Scenario
) -> None:
    asyncio.run(_migrated_then(store_url, s))


async def _migrated_then(url: str, s: Scenario) -> None:
    await migrate(url)
    await _run(url, s)
