"""Property: no window of length ``per`` admits more than rate + burst jobs of a key.

Against the real stores, by the admitted_at timestamps the database recorded: random
limits, random arrival patterns, one or two admitters running at once (each with its
own store, so its own connection), and admission passes with random gaps, some long
enough that admission falls behind and then catches up, each admitter admitting ahead
by its own random horizon or not at all (admitted_at is then the time each job was
given, up to that horizon after the pass).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln import JobFilter, NewJob, RateLimit
from kiln.stores import Store, store_from_url
from tests.support.flow import TICK, crowded_windows
from tests.support.stores import migrate


@dataclass(frozen=True)
class Scenario:
    limit: RateLimit
    arrivals: list[tuple[float, int]]  # (wait before, jobs inserted together)
    admitters: int
    gaps: list[float]  # waits between one admitter's passes, used in a cycle
    batch: int
    ahead: list[float]  # each admitter's admission ahead (0: none), seconds


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    per = draw(st.integers(10, 30)) * TICK
    limit = RateLimit(rate=draw(st.integers(1, 4)), per=per, burst=draw(st.integers(0, 3)))
    arrivals = draw(
        st.lists(st.tuples(st.integers(0, 15).map(lambda n: n * TICK), st.integers(1, 6)),
                 min_size=1, max_size=6)
    )
    # short gaps, and stalls of one to three windows that admission has to catch up on
    gap = st.one_of(st.integers(0, 5).map(lambda n: n * TICK),
                    st.integers(1, 3).map(lambda n: n * per))
    return Scenario(
        limit=limit, arrivals=arrivals, admitters=draw(st.integers(1, 2)),
        gaps=draw(st.lists(gap, min_size=1, max_size=5)), batch=draw(st.integers(1, 50)),
        # admitting ahead up to two windows: jobs timed by the bucket, later ones scheduled
        ahead=draw(st.lists(st.integers(0, 2 * round(per / TICK)).map(lambda n: n * TICK),
                            min_size=2, max_size=2)),
    )


async def _arrive(store: Store, key: str, s: Scenario) -> list[int]:
    ids: list[int] = []
    for wait, count in s.arrivals:
        await asyncio.sleep(wait)
        job = NewJob(kind="limited", args={}, queue="q", rate_key=key, rate_limit=s.limit)
        ids += await store.job_insert_many([job] * count)
    return ids


async def _admit(store: Store, key: str, s: Scenario, until: float, offset: int) -> None:
    i = offset
    while time.monotonic() < until:
        await store.jobs_admit(key, s.batch, ahead=s.ahead[offset])
        await asyncio.sleep(s.gaps[i % len(s.gaps)])
        i += 1


async def _run(url: str, s: Scenario) -> None:
    key = f"k{uuid.uuid4().hex[:10]}"
    stores = [store_from_url(url) for _ in range(s.admitters)]
    for store in stores:
        await store.open()
    try:
        horizon = sum(w for w, _n in s.arrivals) + 2 * s.limit.per + max(s.gaps)
        until = time.monotonic() + horizon
        admitting = [
            asyncio.create_task(_admit(store, key, s, until, n)) for n, store in enumerate(stores)
        ]
        ids = await _arrive(stores[0], key, s)
        await asyncio.gather(*admitting)
        rows = await stores[0].job_list(JobFilter(ids=tuple(ids)), limit=1000)
    finally:
        for store in stores:
            await store.close()
    stamps = [r.admitted_at.timestamp() for r in rows if r.admitted_at is not None]
    assert len(rows) == len(ids)
    assert stamps, "nothing was admitted"
    assert all(r.admitted_at >= r.created_at for r in rows if r.admitted_at is not None)
    assert crowded_windows(stamps, s.limit) == [], (s, sorted(stamps))


def test_window_check_finds_a_crowded_window() -> None:
    """The checker itself must be able to fail."""
    limit = RateLimit(rate=2, per=1.0, burst=1)
    assert crowded_windows([0.0, 0.5, 0.9, 1.2], limit) == []
    assert crowded_windows([0.0, 0.5, 0.9, 0.95], limit) == [(0.95, 4)]
    assert crowded_windows([0.0, 0.4, 0.8, 1.0, 1.1], limit) == [(1.1, 4)]


@settings(max_examples=10, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(s=scenarios())
def test_no_window_admits_more_than_rate_plus_burst(store_url: str, s: Scenario) -> None:
    asyncio.run(_migrated_then(store_url, s))


async def _migrated_then(url: str, s: Scenario) -> None:
    await migrate(url)
    await _run(url, s)
