"""The cooperative plain def handler of docs/operating.md ("Plain def handlers") does what
the page says, on every store: on shutdown it stops between steps within kill_grace, its
job is handed back with its checkpoint and no "may still be running" record, and the
next attempt resumes from the checkpoint and completes."""

from __future__ import annotations

import kiln
import kiln.events
from tests.integration.inprocess import Running, config, job_of, open_store
from tests.support.docblocks import example_app
from tests.support.waits import wait_for


async def test_the_cooperative_handler_stops_in_time_and_resumes(store_url: str) -> None:
    app = example_app("operating.md", "cooperative-sync-handler", store_url)
    store = await open_store(store_url)
    try:
        job_id = await kiln.Client(store, app.kinds).enqueue("report.build", {})
        cfg = config(shutdown_timeout=0.1, kill_grace=2.0, dead_after=8.0)
        first = await Running(app.server({"default": 1}, cfg)).started()

        async def some_done() -> bool:
            return bool((await job_of(store, job_id)).params.get("done", 0) >= 3)

        await wait_for(some_done, 10, "a few steps to be checkpointed")
        took = await first.stop()
        assert took < 0.1 + 1.0, f"the handler did not stop between steps ({took:.2f}s)"
        row = await job_of(store, job_id)
        assert row.state is kiln.JobState.AVAILABLE and row.attempt == 0
        stopped_at = row.params["done"]
        assert 3 <= stopped_at < 20
        assert all("may have gone on running" not in e.error for e in row.errors)

        second = await Running(app.server({"default": 1}, cfg)).started()
        try:
            async def completed() -> kiln.JobRow | None:
                row = await job_of(store, job_id)
                return row if row.state is kiln.JobState.COMPLETED else None

            row = await wait_for(completed, 15, "the resumed job to complete")
        finally:
            await second.stop()
        assert row.attempt == 1 and row.params["done"] == 20
        starts = [e for e in second.of(kiln.events.JobStarted) if e.job.id == job_id]
        assert starts and starts[0].job.params["done"] == stopped_at  # resumed, not restarted
    finally:
        await store.close()
