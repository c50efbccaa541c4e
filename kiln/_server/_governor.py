"""Governor: applies the queue controls in the database to this server's pools.

Every server runs one. It reads the controls (kiln._model._controls) once before the pools
start, so a new or restarted server obeys them from its first claim, then again on
each controls notification (PostgreSQL's NOTIFY, or the Bus) and every poll_interval
without notifications. With them it reads again when the notifier reconnects (what was
sent meanwhile is lost) and, as a safety net, every max(poll_interval, dead_after/4).
A paused pool stops claiming and hands back the jobs it claimed ahead; its running
jobs finish. A new concurrency holds at once: lowering it lets running jobs finish
and only stops new claims; raising it claims at once. The claim itself skips a paused
queue (the stores' claim queries), so a pause holds from its commit on, even before
a server has heard of it. Must not write anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from kiln._errors import KilnError
from kiln._events import EventHub
from kiln._model._controls import QueueControls
from kiln._server._identity import Identity
from kiln._server._pool import Pool
from kiln._server._service import PeriodicService
from kiln.stores import Store

log = logging.getLogger("kiln.governor")


class Governor(PeriodicService):
    name = "governor"

    def __init__(
        self,
        *,
        store: Store,
        events: EventHub,
        pools: Callable[[], Mapping[str, Pool]],
        configured: Mapping[str, int],
        identity: Identity,
        interval: float,  # without notifications
        notified_interval: float,  # with them: the safety net
        notified: Callable[[], bool],
        on_resized: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(interval, events)
        self._store = store
        self._pools = pools
        self._configured = dict(configured)
        self._identity = identity
        self._notified_interval = notified_interval
        self._notified = notified
        self._on_resized = on_resized
        self.controls = QueueControls()  # as last read

    async def first_pass(self) -> None:
        """Obey the queue controls before the first claim (a pause holds in the claim
        anyway; a lowered concurrency would not)."""
        try:
            await self.run_once()
        except (KilnError, OSError) as exc:
            log.warning("server %s could not read the queue controls (%s); its governor"
                        " tries again in poll_interval", self._identity.id, exc)

    def first_delay(self) -> float:
        return self.next_delay({})

    def next_delay(self, counts: dict[str, int]) -> float:
        if self._notified():
            return self._notified_interval
        return super().next_delay(counts)

    async def run_once(self) -> dict[str, int]:
        controls = await self._store.queue_controls()
        self.controls = controls
        return self.apply(controls)

    def apply(self, controls: QueueControls) -> dict[str, int]:
        """Bring every pool in line with ``controls``; return what changed."""
        counts = {"paused": 0, "resumed": 0, "resized": 0}
        server_id = self._identity.id
        for queue, pool in self._pools().items():
            pause = controls.pause_of(queue)
            if (pause is not None) != pool.paused:
                pool.set_paused(pause is not None)
                counts["paused" if pause else "resumed"] += 1
                log.info("queue %s %s on server %s%s", queue,
                         "paused" if pause else "resumed", server_id,
                         f" (by {pause.paused_by} at {pause.paused_at:%Y-%m-%d %H:%M:%S%z})"
                         if pause else "")
            limit = controls.limit_of(queue, server_id, self._configured[queue])
            if limit != pool.concurrency:
                log.info("queue %s concurrency %d -> %d on server %s", queue,
                         pool.concurrency, limit, server_id)
                pool.set_concurrency(limit)
                counts["resized"] += 1
        if counts["resized"]:
            self._on_resized()
        return counts
