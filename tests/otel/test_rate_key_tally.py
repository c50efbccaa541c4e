"""RateKeyTally: the per rate key counters name a bounded set of keys, the busiest."""

from __future__ import annotations

from kilnotel._rate_keys import RateKeyTally


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_at_most_reported_keys_the_busiest_of_the_last_epoch() -> None:
    clock = Clock()
    tally = RateKeyTally(reported=3, epoch=60.0, clock=clock)
    for i in range(100):  # 100 tenants, tenant i with i admissions and i starts
        tally.admitted(f"t{i}", i)
        for _ in range(i):
            tally.started(f"t{i}")
    assert tally.top() == [("t99", 99, 99), ("t98", 98, 98), ("t97", 97, 97)]
    clock.now = 61.0  # an epoch ends: t5 is now the busiest of the last one
    tally.admitted("t5", 1000)
    clock.now = 62.0
    assert [k for k, _a, _s in tally.top()] == ["t5", "t99", "t98"]
    clock.now = 130.0  # the next epoch: only t1 was busy in it
    tally.started("t1")
    clock.now = 131.0
    # t1's totals are cumulative (a counter never goes back); the tenants idle for two
    # epochs were forgotten, as more than ten times ``reported`` keys were held
    assert tally.top() == [("t1", 1, 2)]


def test_a_collection_within_a_second_keeps_the_keys_and_reads_totals_now() -> None:
    clock = Clock()
    tally = RateKeyTally(reported=1, clock=clock)
    tally.admitted("a", 5)
    assert tally.top() == [("a", 5, 0)]
    tally.admitted("b", 50)
    tally.started("a")
    clock.now = 0.5
    assert tally.top() == [("a", 5, 1)]  # the same key (both counters agree), fresh totals
    clock.now = 1.5
    assert tally.top() == [("b", 50, 0)]


def test_idle_keys_are_forgotten_beyond_ten_times_the_reported() -> None:
    clock = Clock()
    tally = RateKeyTally(reported=2, epoch=10.0, clock=clock)
    for i in range(50):
        tally.admitted(f"old{i}", 1)
    tally.top()
    for now in (11.0, 22.0):  # two epochs without events for the old keys
        clock.now = now
        tally.admitted("busy", 1)
        tally.top()
    clock.now = 33.0
    tally.top()
    assert len(tally._totals) <= tally.keep
    assert "busy" in tally._totals


def test_a_key_is_born_at_zero_and_goes_on_from_its_total() -> None:
    """A series' first sample is 0, or increase() and rate() never count the jobs
    before it (tests/ops/test_live_prometheus.py checks every counter so); after that
    the cumulative total, which a key that left the set and came back goes on from."""
    clock = Clock()
    tally = RateKeyTally(reported=1, clock=clock)
    tally.admitted("a", 5)
    tally.started("a")

    def values(field: int) -> list[tuple[str, int | float]]:
        return [(str((o.attributes or {})["rate_key"]), o.value)
                for o in tally.observations(field)]

    assert values(0) == [("a", 0)] and values(1) == [("a", 0)]
    assert values(0) == [("a", 5)] and values(1) == [("a", 1)]
    clock.now = 61.0  # b is the busiest of the next epoch: a leaves the set
    tally.admitted("b", 50)
    clock.now = 62.0
    assert values(0) == [("b", 0)]
    assert values(0) == [("b", 50)]
    clock.now = 125.0  # a is the busiest again: it goes on from its total, not from 0
    tally.admitted("a", 100)
    clock.now = 126.0
    assert values(0) == [("a", 105)]
