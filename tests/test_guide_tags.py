"""docs/guide.md, "Tags and filters": its two blocks run as written, on every store, and
the operator's requeue takes exactly the failed billing jobs of tenant 42."""

from __future__ import annotations

from typing import Any

import kiln
from kiln._model._job import AttemptError, JobResult, Outcome
from tests.support.docblocks import blocks_under_test


async def test_the_guides_tags_blocks(store_url: str) -> None:
    producer, operator = blocks_under_test("guide.md", __file__)[:2]
    namespace: dict[str, Any] = {"kiln": kiln, "url": store_url}
    try:
        exec(producer, namespace)
        exec(operator, namespace)
        app: kiln.App = namespace["app"]
        client = app.client()
        ours, rush, theirs = (namespace[n] for n in ("ours", "rush", "theirs"))
        assert [(await client.get(i)).tags for i in (ours, rush)] == [  # type: ignore[union-attr]
            ["billing", "email"], ["billing", "urgent"]]
        rows = await client._store.job_claim("billing", ["invoice.send"], 10, "srv")
        await client._store.job_results_apply([
            JobResult(r.id, "srv", r.attempt, Outcome.FAILED, error=AttemptError(
                r.attempt, 0.0, "SMTP down")) for r in rows])
        assert await namespace["requeue_tenant_42"]() == 2
        states = [(await client.get(i)).state.value for i in (ours, rush, theirs)]  # type: ignore[union-attr]
        assert states == ["available", "available", "failed"]
    finally:
        if "app" in namespace:
            await namespace["app"].aclose()
            namespace["app"].close()
