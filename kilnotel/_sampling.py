"""``ProducerSampler``: an attempt is traced when the request that enqueued it was.

Owns the sampling decision kilnotel offers for job traces. A ``process`` span is the
root of a trace of its own with a link to its producer's context (the messaging
conventions' default), so a plain ratio sampler would keep a sampled request's job trace
only at that ratio. This one keeps every span whose link is sampled (the enqueuing
request was kept), and samples the others by their trace id at ``ratio``, exactly as
``TraceIdRatioBased`` does. Put it at the root of ``ParentBased`` (``kiln worker
--otlp-endpoint`` does, with ``--trace-sample-ratio``): children follow their parent.
kilnotel's fast path recognises it and decides from the trace id and the link without
calling it (``_attempt_spans``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import (
    Decision,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes


class ProducerSampler(Sampler):
    def __init__(self, ratio: float) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"the sampling ratio must be between 0 and 1, got {ratio!r}")
        self.ratio = ratio
        self.by_ratio = TraceIdRatioBased(ratio)

    @property
    def bound(self) -> int:
        """The trace ids below which ``TraceIdRatioBased`` samples (its own bound)."""
        return int(self.by_ratio.bound)

    def should_sample(
        self, parent_context: Context | None, trace_id: int, name: str,
        kind: SpanKind | None = None, attributes: Attributes = None,
        links: Sequence[Link] | None = None, trace_state: TraceState | None = None,
    ) -> SamplingResult:
        for link in links or ():
            if link.context.trace_flags.sampled:
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, trace_state)
        result: Any = self.by_ratio.should_sample(parent_context, trace_id, name, kind,
                                                  attributes, links, trace_state)
        return result  # type: ignore[no-any-return]

    def get_description(self) -> str:
        return f"ProducerSampler{{{self.ratio}}}"
