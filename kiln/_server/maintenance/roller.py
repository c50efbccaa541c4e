"""Roller: counts finished jobs into the timings rollup the charts read (leader only).

Each pass rolls windows of at most an hour (kiln._model._rollup: each window and its
watermark in one transaction, under the watermark's row lock) until it is caught up
to a minute before now, up to MAX_STEPS windows; after each window that left it
behind it rests REST times as long as the window took, and the next pass follows at
once. A backlog (the first roll of a database, a leader back after an outage) is so
rolled in the background with about a third of one connection's time. The pruner
deletes no finished job the rollup has not counted (the stores bound its delete by
the watermark), so a rollup that stops also stops the pruning: its failures are
logged and counted like any maintenance failure. Runs every ROLL_EVERY seconds (or
prune_interval, if shorter). Owns no SQL.
"""

from __future__ import annotations

import asyncio
import time

from kiln._server._config import seconds
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

ROLL_EVERY = 15.0  # seconds between passes
MAX_STEPS = 24  # windows per pass, at most
REST = 2.0  # behind: rest this many times as long as a window took


class Roller(PeriodicService):
    name = "roller"

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(min(ROLL_EVERY, seconds(ctx.config.prune_interval)), ctx.events)
        self._ctx = ctx
        self._more = False
        self.rolled = 0

    def next_delay(self, counts: dict[str, int]) -> float:
        return 0.0 if self._more else super().next_delay(counts)

    async def run_once(self) -> dict[str, int]:
        """Roll until caught up (or MAX_STEPS windows); returns the jobs counted."""
        jobs, done = 0, False
        for _ in range(MAX_STEPS):
            began = time.monotonic()
            n, done = await self._ctx.store.timings_roll()
            jobs += n
            if done:
                break
            await asyncio.sleep((time.monotonic() - began) * REST)
        self._more = not done
        self.rolled += jobs
        return {"jobs": jobs}
