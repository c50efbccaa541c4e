"""kilnotel on enqueue_many's batch path: the enqueued counter counts what was inserted
(not a unique job's duplicates), and each batch is one producer span whose context
every job stores."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

import kiln
import kilnotel
from kilnotel import names as n
from tests.support.otel import Telemetry


@pytest.fixture
def observed(store_url: str, telemetry: Telemetry) -> kiln.App:
    app = kiln.App(store_url)
    app.register("a", lambda job: None, queue="qa")
    app.register("u", lambda job: None, unique=kiln.Unique(by=("args.n",)))
    app.migrate()
    kilnotel.observe_app(app, telemetry.meter_provider, telemetry.tracer_provider)
    return app


async def test_batches_count_inserted_jobs_and_make_one_span_each(
    observed: kiln.App, telemetry: Telemetry
) -> None:
    app = observed
    sync_ids = app.enqueue_many([("a", {"n": i}) for i in range(20)] + [("u", {"n": 1})])
    async_ids = await app.aenqueue_many(
        [("a", {"n": i}) for i in range(5)] + [("u", {"n": 1}), ("u", {"n": 2}), ("u", {"n": 2})]
    )
    assert [r.inserted for r in async_ids[5:]] == [False, True, False]
    assert telemetry.value(n.JOBS_ENQUEUED.name, queue="qa", kiln_job_kind="a") == 25
    assert telemetry.value(n.JOBS_ENQUEUED.name, queue="default", kiln_job_kind="u") == 2
    sends = [s for s in telemetry.spans() if s.kind is SpanKind.PRODUCER]
    assert [s.attributes["messaging.batch.message_count"] for s in sends  # type: ignore[index]
            ] == [21, 8]
    client = app.client()
    for ids, send in ((sync_ids, sends[0]), (async_ids, sends[1])):
        assert send.context is not None
        for job_id in (ids[0], ids[-1]):
            row = await client.get(job_id)
            assert row is not None
            assert f"{send.context.span_id:016x}" in row.metadata["traceparent"]
    await app.aclose()
    app.close()
