"""The cooperative plain def handler of docs/guide.md ("Cancelling a running job") stops
when its job is cancelled from outside, on every store: the job ends cancelled on its
first attempt, with the actor recorded, its checkpoint kept, and is never retried."""

from __future__ import annotations

import kiln
import kiln.events
from tests.integration.inprocess import Running, config, job_of, open_store
from tests.support.docblocks import example_app
from tests.support.waits import wait_for


async def test_the_cooperative_handler_stops_when_its_job_is_cancelled(store_url: str) -> None:
    app = example_app("guide.md", "cancel-cooperative-handler", store_url)
    store = await open_store(store_url)
    try:
        client = kiln.Client(store, app.kinds)
        job_id = await client.enqueue("export.run", {})
        running = await Running(app.server({"default": 1}, config())).started()
        try:
            async def some_done() -> bool:
                return bool((await job_of(store, job_id)).params.get("batch", 0) >= 3)

            await wait_for(some_done, 10, "a few batches to be checkpointed")
            assert await client.cancel(kiln.filter_of(ids=[job_id]), actor="ops:alice") == 1
            [stopped] = await wait_for(lambda: running.of(kiln.events.JobCancelled), 5,
                                       "the handler to stop")
            assert not stopped.stuck  # it returned within kill_grace
        finally:
            await running.stop()
        row = await job_of(store, job_id)
        assert row.state is kiln.JobState.CANCELLED and row.attempt == 1
        assert 3 <= row.params["batch"] < 1000
        assert [e.error for e in row.errors] == ["Cancelled by ops:alice"]
        assert [e.outcome for e in running.finished(job_id)] == [kiln.Outcome.CANCELLED]
    finally:
        await store.close()
