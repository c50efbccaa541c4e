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
