"""A long backlog goes at the configured rate.

Admitting ahead (kiln.stores._admission), a round gives each job the time the bucket
allows it up to 0.2 s ahead, so a backlog goes at the rate with any burst, 0 included
(docs/rate-limits.md, "Reaching the rate"): checked through plan() with rounds at
fixed gaps. Without admission ahead (kiln.testing's drain), a round admits at most
what the bucket holds, max(burst, 1): a burst of one round's refill is then what lets
a backlog go at the rate, checked through plan() and through each store with two
rounds 0.1 s apart.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import math

import pytest

from kiln._model._job import RateLimit
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


def _drain_ahead(limit: RateLimit, gap: float, seconds: float, ahead: float) -> list[float]:
    """Rounds every ``gap`` seconds admitting ``ahead``, as the stores call plan() (the
    bucket's time may be left in the future). Returns every admission's time."""
    tokens, updated, now = float(max(limit.burst, 1)), 0.0, 0.0
    times: list[float] = []
    while now < seconds:
        d = plan(limit, tokens, updated, now, 0, 1000, None, ahead)
        times += [now + off / 1e6 for off in d.offsets]
        tokens, updated = d.tokens, now + d.updated / 1e6
        assert all(now + off / 1e6 < now + ahead + 1e-9 or off == 0 for off in d.offsets)
        now += min(gap, d.next_at)  # the admitter sleeps at most until next_at
    return times


@pytest.mark.parametrize("rate", [5, 50, 1000, 3000, 20_000])
@pytest.mark.parametrize("gap", [0.002, 0.03, 0.09])
@pytest.mark.parametrize("burst", [0, 3])
def test_admitting_ahead_goes_at_the_rate_with_any_burst(rate: int, gap: float,
                                                        burst: int) -> None:
    """burst 0, the natural call: rounds up to 90 ms apart, admitting 0.2 s ahead."""
    limit = RateLimit(rate=rate, per=1.0, burst=burst)
    times = _drain_ahead(limit, gap, 10.0, 0.2)
    assert times == sorted(times)
    admitted = sum(1 for t in times if t <= 10.0)
    assert admitted >= 0.99 * rate * 10.0, (admitted, rate * 10)
    for i, t in enumerate(times):  # no window of per admits more than rate + burst
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
