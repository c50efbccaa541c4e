"""PostgreSQL only: a cancellation that psycopg_pool drops while it waits for a
connection (its asyncio.wait_for on Python 3.11 can return the connection instead) is
raised by the store, so a stopping service does not run on for ever."""

from __future__ import annotations

import asyncio
import contextlib

from kiln.stores.postgres import PostgresStore


class SwallowingPool:
    """Waits for a connection and, cancelled meanwhile, hands one out anyway."""

    def __init__(self) -> None:
        self.returned: list[object] = []

    async def getconn(self) -> object:
        # the race in asyncio.wait_for: the result wins, the cancel is lost
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        return object()

    async def putconn(self, conn: object) -> None:
        self.returned.append(conn)


async def test_a_cancel_dropped_while_waiting_for_a_connection_is_raised() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none")
    pool = SwallowingPool()
    store._pool = pool  # type: ignore[assignment]
    task = asyncio.ensure_future(store.now())
    await asyncio.sleep(0.01)
    task.cancel()
    done, _pending = await asyncio.wait([task], timeout=5)
    assert done and task.cancelled()
    assert len(pool.returned) == 1  # and the connection it was handed went back
    store._pool = None
