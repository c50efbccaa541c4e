"""Bulk actions the dashboard runs in the background, and the page that follows one.

Owns ``BulkRuns``: the runs this dashboard process started (kiln._client._bulk), by id, the
latest few kept once finished. A confirmed "all matching" action starts a run and waits
a moment for it: one that finishes in that time redirects as a single action does; a
longer one redirects to its progress page (/jobs/all/runs/{id}), which refreshes itself
and, when the run stopped on an error, offers to finish the rest within the same bounds.
Must not change jobs itself: that is the run's Client calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from starlette.exceptions import HTTPException

from kiln._client._bulk import Bulk, Progress
from kiln.web._params import JobQuery

log = logging.getLogger("kiln.web")
KEEP = 20  # finished runs kept for their progress page


@dataclasses.dataclass
class BulkTask:
    bulk: Bulk
    query: JobQuery  # the listing it came from, to return to
    task: asyncio.Task[Progress]

    @property
    def error(self) -> str | None:
        if not self.task.done() or self.task.cancelled():
            return "stopped" if self.task.cancelled() else None
        exc = self.task.exception()
        return None if exc is None else f"{type(exc).__name__}: {exc}"

    async def wait(self, timeout: float) -> bool:
        """True once the run ended (done or failed) within ``timeout`` seconds."""
        await asyncio.wait({self.task}, timeout=timeout)  # never cancels it, never raises
        return self.task.done()


class BulkRuns:
    """The runs of this dashboard process (a run belongs to the process that started it)."""

    def __init__(self) -> None:
        self._runs: dict[str, BulkTask] = {}

    def start(self, bulk: Bulk, query: JobQuery, after: Callable[[], None]) -> BulkTask:
        task = asyncio.create_task(bulk.run(), name=f"kiln-bulk-{bulk.run_id}")
        task.add_done_callback(lambda t: _ended(t, bulk, after))
        run = self._runs[bulk.run_id] = BulkTask(bulk, query, task)
        finished = [k for k, r in self._runs.items() if r.task.done()]
        for key in finished[: max(0, len(finished) - KEEP)]:
            del self._runs[key]
        return run

    def get(self, run_id: str) -> BulkTask:
        run = self._runs.get(run_id)
        if run is None:
            raise HTTPException(404, f"No bulk run {run_id[:40]!r} in this dashboard process"
                                " (finished runs are kept for a while; see the audit log).")
        return run


def _ended(task: asyncio.Task[Progress], bulk: Bulk, after: Callable[[], None]) -> None:
    after()
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("dashboard: bulk %s run %s stopped after %d batches: %s",
                    bulk.action, bulk.run_id, bulk.progress.batches, exc)
