"""PostgreSQL only: a cancellation that psycopg_pool drops while it waits for a
connection (its asyncio.wait_for on Python 3.11 can return the connection instead) is
raised by the store, so a stopping service does not run on for ever."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from kiln.stores.postgres import PostgresStore


class SwallowingPool:
    """Waits for a connection and, cancelled meanwhile, hands one out anyway."""

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[object]:
        # the race in asyncio.wait_for: the result wins, the cancel is lost
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        yield object()


async def test_a_cancel_dropped_while_waiting_for_a_connection_is_raised() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none")
    store._pool = SwallowingPool()  # type: ignore[assignment]
    task = asyncio.ensure_future(store.now())
    await asyncio.sleep(0.01)
    task.cancel()
    done, _pending = await asyncio.wait([task], timeout=5)
    assert done and task.cancelled()
    store._pool = None
