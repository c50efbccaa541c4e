"""The connection MySQLStore keeps from its pool for its own writes.

Owns taking it from the pool, putting a lent pool's connection in kiln's session
settings and giving them back, replacing it when it breaks, and sharing it: every
MySQLStore on one lent pool (an App makes a store per event loop and per server) writes
through the same kept connection, one plan at a time, so a pool of two connections is
always enough however many stores use it.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from kiln.stores.mysql._plan import server_is_mariadb

LOCK_WAIT_TIMEOUT = 10  # seconds a write waits for a row lock before failing
SESSION = (
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;"
    f" SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT}"
)


class Kept:
    """One kept connection and the lock that runs one write plan at a time on it."""

    def __init__(self, pool: Any, lent: bool) -> None:
        self.pool = pool
        self.lent = lent
        self.lock = asyncio.Lock()
        self.users = 0
        self._conn: Any = None
        self._restore = ""  # a lent connection's own session settings

    async def get(self) -> Any:
        """The kept connection, taken from the pool if needed (call under ``lock``)."""
        if self._conn is None:
            conn = await self.pool.acquire()
            try:
                if self.lent:
                    await self._borrow(conn)
            except BaseException:
                conn.close()
                await release(self.pool, conn)
                raise
            self._conn = conn
        return self._conn

    async def discard(self) -> None:
        """Drop a broken connection; the next ``get`` takes a fresh one."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await release(self.pool, conn)

    async def discard_if_dead(self) -> None:
        """After a failed plan: drop the connection if the failure closed it."""
        if self._conn is not None and not alive(self._conn):
            await self.discard()

    async def give_back(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._restore and alive(conn):
            try:
                await _execute(conn, self._restore)
            except Exception:
                conn.close()
        await release(self.pool, conn)

    async def _borrow(self, conn: Any) -> None:
        isolation = "tx_isolation" if server_is_mariadb(conn) else "transaction_isolation"
        async with conn.cursor() as cur:
            await cur.execute(
                "SELECT @@SESSION.autocommit, @@SESSION.innodb_lock_wait_timeout,"
                f" @@SESSION.{isolation}"
            )
            autocommit, timeout, level = (await cur.fetchall())[0]
        self._restore = (
            f"SET SESSION autocommit = {int(autocommit)};"
            f" SET SESSION innodb_lock_wait_timeout = {int(timeout)};"
            f" SET SESSION TRANSACTION ISOLATION LEVEL {str(level).replace('-', ' ')}"
        )
        await _execute(conn, f"SET SESSION autocommit = 1; {SESSION}")


_SHARED: dict[int, Kept] = {}  # lent pool id -> its kept connection


def join(pool: Any, lent: bool) -> Kept:
    """The Kept of ``pool``: shared for a lent pool, private for the store's own."""
    kept = _SHARED.get(id(pool)) if lent else None
    if kept is None or kept.pool is not pool:
        kept = Kept(pool, lent)
        if lent:
            _SHARED[id(pool)] = kept
    kept.users += 1
    return kept


async def leave(kept: Kept) -> None:
    """A store is done with ``kept``; the last one gives the connection back."""
    kept.users -= 1
    if kept.users > 0:
        return
    if _SHARED.get(id(kept.pool)) is kept:
        del _SHARED[id(kept.pool)]
    async with kept.lock:
        await kept.give_back()


def alive(conn: Any) -> bool:
    connected = getattr(conn, "connected", None)
    if connected is not None:
        return bool(connected() if callable(connected) else connected)
    return not bool(getattr(conn, "closed", False))


async def release(pool: Any, conn: Any) -> None:
    done = pool.release(conn)
    if inspect.isawaitable(done):
        await done


async def _execute(conn: Any, sql: str) -> None:
    async with conn.cursor() as cur:
        await cur.execute(sql)
        while await cur.nextset():
            pass
