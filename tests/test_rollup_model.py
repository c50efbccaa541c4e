"""The timings rollup's arithmetic (kiln._model._rollup): windows, the pruner's bound
and the parts a read adds up. The stores: tests/stores/test_conformance_rollup.py."""

from __future__ import annotations

from kiln._model import _rollup as r

NOW = 1_800_000_000.0 + 37.5  # a time within a minute


def test_a_window_ends_a_minute_before_now_and_spans_an_hour_at_most() -> None:
    target = int((NOW - r.LAG) // 60) * 60
    assert r.window(target, NOW) is None  # caught up
    assert r.window(target - 60, NOW, first=target - 30) == (target - 60, target)
    start, to = r.window(target - 7200, NOW, first=target - 7200) or (0, 0)
    assert (start, to) == (target - 7200, target - 7200 + r.MAX_WINDOW)
    # nothing finished since: the watermark moves to the target in one window
    assert r.window(target - 7200, NOW, first=None) == (target - 7200, target)
    # a quiet stretch is skipped up to the minute of the first finish after it
    assert r.window(target - 7200, NOW, first=target - 601.0) == (target - 660, target)
    # never rolled: from START_BACK ago, on a quarter hour
    start, _ = r.window(None, NOW, first=None) or (0, 0)
    assert start % r.QUARTER == 0 and NOW - r.START_BACK - r.QUARTER < start <= NOW - r.START_BACK


def test_the_pruner_waits_for_the_watermark() -> None:
    assert r.prune_bound(1234, NOW) == 1234.0
    assert r.prune_bound(None, NOW) == NOW - r.START_BACK - r.UNROLLED_GRACE


def test_a_read_adds_quarters_minutes_and_the_tail_without_overlap() -> None:
    mark = int(NOW // 60) * 60 - 120  # two minutes ago, within a quarter
    for bucket, points in ((60.0, 60), (300.0, 72), (900.0, 96), (7200.0, 84)):
        start, quarters, tail = r.read_bounds(mark, NOW, bucket, points)
        assert start % bucket == 0 and start <= quarters <= tail == mark
        if r.width_for(bucket) == r.QUARTER:
            # whole quarters only: the one the watermark is in still grows with rolls
            assert quarters % r.QUARTER == 0 and tail - quarters < r.QUARTER
        else:
            assert quarters == start
    # never rolled: everything from the jobs
    start, quarters, tail = r.read_bounds(None, NOW, 900.0, 96)
    assert start == quarters == tail


def test_finished_bounds_split_a_span_at_whole_minutes_and_the_watermark() -> None:
    """The dashboard's finished counts: the rollup's minute rows from the first whole
    minute of the span to the watermark, the jobs for the rest."""
    now = 1_000_000.0 * 60 + 30  # 30 s into a minute
    mark = int(now // 60) * 60 - 120
    first = int(now - 3600 + 30)  # the span's first whole minute
    assert r.finished_bounds(mark, now, now - 3600, 60) == (first, mark)
    assert r.finished_bounds(mark, now, now - 3600, 1) == (first, first)  # 1 s buckets
    start = float(mark - 3600)  # on a minute: no head read from the jobs
    assert r.finished_bounds(mark, now, start, 60) == (mark - 3600, mark)
    # the rollup cannot serve: never rolled, buckets that straddle minutes, too old
    assert r.finished_bounds(None, now, now - 3600, 60) == (first, first)
    assert r.finished_bounds(mark, now, now - 3600, 90) == (first, first)
    old = now - r.KEEP[r.MINUTE]
    assert r.finished_bounds(mark, now, old, 60)[0] == r.finished_bounds(
        mark, now, old, 60)[1]
    # a watermark before the span: everything from the jobs
    assert r.finished_bounds(first - 600, now, now - 3600, 60) == (first, first)
