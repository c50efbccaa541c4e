"""A long backlog goes at the configured rate when the burst covers one admission round.

A round admits at most what the key's bucket holds, max(burst, 1), and rounds come one
database round trip or more apart: a key's admissions are at most max(burst, 1) per
round (docs/rate-limits.md, "Reaching high rates"). With a burst of at least the rate's
refill over one round, a backlog goes at the rate; these check that through plan() with
rounds at fixed gaps, and through each store with two rounds 0.1 s apart.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import math

import pytest

from kiln._job import RateLimit
from kiln.stores import Store
from kiln.stores._admission import plan
from tests.stores.factories import insert, job


def _drain(limit: RateLimit, gap: float, seconds: float) -> list[tuple[float, int]]:
    """An admitter's rounds every ``gap`` seconds against an endless backlog, as the
    stores call plan(). Returns (time, admitted) per round."""
    tokens, updated = 0.0, 0.0
    window: collections.deque[tuple[float, int]] = collections.deque()  # (time, admitted)
    in_window = 0
    rounds = []
    now = 0.0
    while now < seconds:
        while window and window[0][0] <= now - limit.per:
            in_window -= window.popleft()[1]
        d = plan(limit, tokens, updated, now, in_window, 1000, window[0][0] if window else None)
        if d.admit:
            window.append((now, d.admit))
            in_window += d.admit
        tokens, updated = d.tokens, now
        rounds.append((now, d.admit))
        now += gap
    return rounds


@pytest.mark.parametrize("rate", [5, 50, 1000, 20_000])
@pytest.mark.parametrize("gap", [0.002, 0.03, 0.2])
def test_a_burst_of_one_rounds_refill_lets_a_backlog_go_at_the_rate(rate: int,
                                                                   gap: float) -> None:
    if rate * gap > 1000:
        pytest.skip("a round admits at most admit_batch (1000) jobs of a key")
    limit = RateLimit(rate=rate, per=1.0, burst=math.ceil(rate * gap))
    rounds = _drain(limit, gap, 10.0)
    admitted = sum(n for _t, n in rounds)
    span = rounds[-1][0]
    # rounds at exact intervals sometimes meet the window's edge (a round a second
    # after a full one admits less): 0.94 to 0.99 of the rate here
    assert admitted >= 0.9 * rate * span, (admitted, rate * span)
    times = [t for t, n in rounds for _ in range(n)]
    for i, t in enumerate(times):  # and no second admits more than rate + burst
        assert bisect.bisect_left(times, t + limit.per) - i <= limit.rate + limit.burst


async def test_a_round_admits_up_to_the_burst(store: Store) -> None:
    """Through each store: a round admits at most the burst, and the next one, 0.1 s
    later at 1,000 a second, what the bucket refilled since (about 100)."""
    limit = RateLimit(rate=1000, per=1.0, burst=100)
    await insert(store, *[job(rate_key="r", rate_limit=limit, args={"n": n})
                          for n in range(400)])
    first = await store.jobs_admit("r", 1000)
    assert len(first.admitted) == 100 and first.next_at is not None
    await asyncio.sleep(0.1)
    second = await store.jobs_admit("r", 1000)
    assert 90 <= len(second.admitted) <= 100, len(second.admitted)
