"""HandleStore: the store calls a handler makes through its ``Job`` (kiln._server._handle).

Owns two: the checkpoint write (``job.set_param``), fenced like a result (same server
and attempt) and made neither before the claim that started the attempt committed nor
while the heartbeat is unconfirmed; and the cancel check (how long ago the attempt's
job was cancelled). The Executor gets them as callbacks, so that kiln.testing runs a
handler with its own. It writes nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kiln._model._job import JobRow
from kiln._server._identity import Identity
from kiln._server._pool import Pool
from kiln.stores import Store


class HandleStore:
    """``pools`` is the server's own mapping; ``confirmed()`` says whether the server's
    heartbeat is confirmed (a stalled server may already be dead to the others)."""

    def __init__(
        self,
        *,
        store: Store,
        identity: Identity,
        pools: Mapping[str, Pool],
        confirmed: Callable[[], bool],
    ) -> None:
        self._store = store
        self._identity = identity
        self._pools = pools
        self._confirmed = confirmed

    async def write_param(self, row: JobRow, name: str, value: Any) -> bool:
        pool = self._pools.get(row.queue)
        if pool is not None:
            await pool.settled(row.id)  # a claim on a notification may not have committed
        if not self._confirmed():
            # stalled past the fence (a paused process, a blocked loop): to the others
            # this server may be dead, so it writes nothing before the fence lands
            return False
        return await self._store.job_param_set(
            row.id, row.server_id or self._identity.id, row.attempt, name, value
        )

    async def cancel_age(self, row: JobRow) -> float | None:
        """Seconds since this attempt's job was cancelled; None when it was not."""
        for request in await self._store.jobs_cancel_requested([row.id]):
            if request.attempt == row.attempt and request.server_id == row.server_id:
                return request.age
        return None
