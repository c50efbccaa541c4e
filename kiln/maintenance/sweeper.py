"""Sweeper: removes the records of servers that have been dead for sweep_after (leader only).

A dead server's running jobs are the rescuer's business, not the sweeper's: the store
rescues candidates whether or not their server's record is still there, so sweeping
never loses a job. Runs every prune_interval. Owns no SQL.
"""

from __future__ import annotations

from kiln._config import seconds
from kiln._context import ServerContext
from kiln._service import PeriodicService


class Sweeper(PeriodicService):
    name = "sweeper"

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(seconds(ctx.config.prune_interval), ctx.events)
        self._ctx = ctx
        self._after = seconds(ctx.config.sweep_after)
        self.swept = 0

    async def run_once(self) -> dict[str, int]:
        """Delete the records of long-dead servers; returns how many."""
        n = await self._ctx.store.servers_sweep(self._after)
        self.swept += n
        return {"servers": n}
