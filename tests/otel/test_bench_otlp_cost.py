"""bench/bench_otel_cost.py --otlp: its spans really reach the sink over OTLP."""

from __future__ import annotations

from bench.bench_otel_cost import OTLP_CONFIGS, otlp_costs


def test_the_otlp_cost_bench_exports_every_sampled_span() -> None:
    result = otlp_costs(jobs=200, runs=1)
    assert set(result["us_per_attempt"]) == {name for name, _m, _t in OTLP_CONFIGS}
    # every sampled attempt's span was decoded by the sink; none at ratio 0
    assert result["spans_received_per_batch"]["sampled_exported"] == 200
    assert "unsampled" not in result["spans_received_per_batch"]
    assert "sampled_discarded" not in result["spans_received_per_batch"]
    assert result["us_added"]["per_exported_span"] is not None
