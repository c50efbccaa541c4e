"""Declarations: what a server declares in the store about its work, besides its
registration (the Heartbeater's).

Owns two. Its kinds' declarations, published at start so that producers without the
handlers (the CLI, a bare Client) enqueue with them (docs/guide.md), and again after a
rejoin, in the background: declarations published under the old id no longer count
as a live server's. And its queues' global limits (kiln.Concurrency), declared at
start, which with the limits other servers declared say which of its queues claim
through the limited claim (Store.job_claim).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping

from kiln._aio._tasks import stop_task
from kiln._errors import KilnError
from kiln._model._concurrency import Concurrency, limited_queues, queue_group
from kiln._model._kinds import Kind
from kiln._server._identity import Identity
from kiln._server.maintenance.adopter import limits_changed
from kiln.stores import Store

log = logging.getLogger("kiln.server")


class Declarations:
    def __init__(
        self,
        *,
        store: Store,
        identity: Identity,
        kinds: Mapping[str, Kind],
        queues: Mapping[str, int],
        queue_limits: Mapping[str, Concurrency],
        dead_after: float,
    ) -> None:
        self._store = store
        self._dead_after = dead_after
        self.rekey: set[str] = set()  # kinds whose limit changed at publish (the adopter's)
        self._identity = identity
        self._kinds = kinds
        self._queues = queues
        self._queue_limits = queue_limits
        self._republish: asyncio.Task[None] | None = None

    @property
    def limits_on_kinds(self) -> bool:
        """Whether one of the kinds has a limit of its own: then the pools' claims lock
        and count keys, else only their queue's limit (Store.job_claim)."""
        return any(k.concurrency for k in self._kinds.values())

    async def publish_kinds(self) -> None:
        """The kinds' declarations, and the queue limits, which last while a live server
        declares them; a kind whose limit changed since the previous declaration is
        left for the adopter to rekey (kiln._server.maintenance.adopter)."""
        info = self._identity.info
        before = await self._store.kind_declarations()  # what the adopter may rekey from
        await self._store.kinds_publish(
            info.id, info.host, info.pid, [kind.declaration() for kind in self._kinds.values()]
        )
        self.rekey.update(limits_changed(self._kinds, before))
        declared = {queue_group(q): c.max for q, c in self._queue_limits.items()}
        if declared:
            await self._store.concurrency_declare(declared, info.id)

    async def limited_queues(self) -> set[str]:
        """The queues whose claims must count, after the queue limits no live server
        declares any more are removed (docs/operating.md, "What happens to jobs in
        flight when a declaration changes between deploys")."""
        declared = {queue_group(q) for q in self._queue_limits}
        for key in await self._store.concurrency_sweep(self._dead_after):
            log.info("server %s: the concurrency limit %s is no longer declared by any live"
                     " server: removed", self._identity.id, key)
        found = set(await self._store.concurrency_in_use())  # limits other servers declared
        return limited_queues(self._queues, self.limits_on_kinds, declared | found)

    def publish_again(self) -> None:
        """After a rejoin, in the background; it supersedes an earlier rejoin's."""
        if self._republish is not None:
            self._republish.cancel()
        self._republish = asyncio.get_running_loop().create_task(
            self._publish_again(), name="kiln-kinds-publish"
        )

    async def stop(self) -> None:
        # waited for (bounded), not just cancelled: one still running after the store
        # closed would open it again, and nothing would close that
        with contextlib.suppress(Exception):
            await stop_task(self._republish)

    async def _publish_again(self) -> None:
        try:
            await self.publish_kinds()
        except (KilnError, OSError) as exc:  # producers keep the declaration they have
            log.warning("server %s could not publish its kinds again: %s",
                        self._identity.id, exc)
