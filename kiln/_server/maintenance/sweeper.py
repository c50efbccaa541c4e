"""Sweeper: removes the records of servers that have been dead for sweep_after, the
queue concurrency limits no live server declares any more, and releases dependents
stranded on jobs that no longer exist (leader only).

A dead server's running jobs are the rescuer's business, not the sweeper's: the store
rescues candidates whether or not their server's record is still there, so sweeping
never loses a job. A dependent is released by the completion or the deletion (or
pruning) of its dependency; one whose dependencies are all completed or gone and that
is still awaiting missed that release (a dependency pruned by an older kiln, a lost
race), and nothing else would ever free it: the sweeper releases it, logs a warning
and reports it (``stranded`` in its counts, ``JobsReleased`` with reason
``stranded``). A queue's limit (app.queue_concurrency) lasts while a server whose
heartbeat is within dead_after declares it: the sweeper removes the others (each
server also does so as it starts) and logs each one. Runs every prune_interval. Owns
no SQL.
"""

from __future__ import annotations

import logging

from kiln._server._config import seconds
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

log = logging.getLogger("kiln.sweeper")


class Sweeper(PeriodicService):
    name = "sweeper"

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(seconds(ctx.config.prune_interval), ctx.events)
        self._ctx = ctx
        self._after = seconds(ctx.config.sweep_after)
        self._dead_after = seconds(ctx.config.dead_after)
        self._batch = int(ctx.config.prune_batch)
        self.swept = 0
        self.stranded = 0

    async def run_once(self) -> dict[str, int]:
        """Delete the records of long-dead servers and release stranded dependents;
        returns how many of each."""
        n = await self._ctx.store.servers_sweep(self._after)
        self.swept += n
        limits = await self._ctx.store.concurrency_sweep(self._dead_after)
        for key in limits:
            log.info("the concurrency limit %s is no longer declared by any live server:"
                     " removed", key)
        return {"servers": n, "limits": len(limits),
                "stranded": await self._release_stranded()}

    async def _release_stranded(self) -> int:
        released = await self._ctx.store.jobs_release_stranded(self._batch)
        total = sum(released.values())
        if not total:
            return 0
        self.stranded += total
        log.warning(
            "released %d awaiting job(s) whose dependencies were all completed or gone"
            " (%s); they had missed their release", total,
            ", ".join(f"{q}: {c}" for q, c in sorted(released.items())),
        )
        self._ctx.wake(released, "stranded")  # which says JobsReleased
        return total
