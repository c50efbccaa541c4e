"""What a store's timings read shares: its row type and class SQL (kiln._model._timings)
and the bound on the rows one read returns."""

from __future__ import annotations

from kiln._model._timings import TimingRow, case_sql, width_bucket_sql

MAX_TIMING_ROWS = 50_000  # groups x buckets x states x classes one read returns, at most

__all__ = ["MAX_TIMING_ROWS", "TimingRow", "case_sql", "width_bucket_sql"]
