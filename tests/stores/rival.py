"""A caller's own transaction beside a store, for the tests of contention: it holds the
locks kiln needs, and tells when a kiln statement waits for it (on the database's own
lock tables, not a sleep)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from kiln.stores import Store
from tests.plugins.databases import mysql_connect
from tests.stores.factories import job


class Rival:
    """A caller's own transaction on the store's database, through the driver."""

    def __init__(self, store: Store, backend: str) -> None:
        self.backend = backend
        if backend == "mysql":
            self.conn: Any = mysql_connect(store.url, autocommit=False)
            self.monitor: Any = mysql_connect(store.url)
        else:
            self.conn = psycopg.connect(store.url)
            # a kiln statement that waits first must be the one to find a deadlock
            # (after its own deadlock_timeout, a second): PostgreSQL cancels the finder
            self.conn.execute("SET deadlock_timeout = '60s'")
            self.monitor = psycopg.connect(store.url, autocommit=True)

    def heavier(self, store: Store) -> None:
        """MariaDB's deadlock victim is the transaction that changed fewer rows: 20
        more for the rival (rolled back with the rest)."""
        if self.backend == "mysql":
            store.job_insert_many_sync([job(kind="r") for _ in range(20)], self.conn)

    async def wait_for_a_waiter(self, task: asyncio.Task[Any]) -> None:
        """Until another transaction waits for this one's locks (``task``'s, blocked)."""
        deadline = asyncio.get_running_loop().time() + 10
        if self.backend == "mysql":
            # the same cache as the lock tables (below): a read by anyone in the last
            # 0.1 s (another test's) can predate this transaction, so read until it is there
            while (mine := self._one("SELECT trx_id FROM information_schema.INNODB_TRX"
                                     " WHERE trx_mysql_thread_id = CONNECTION_ID()",
                                     self.conn)) is None:
                assert asyncio.get_running_loop().time() < deadline, "no transaction of ours"
                await asyncio.sleep(0.15)
            sql = ("SELECT count(*) FROM information_schema.INNODB_LOCK_WAITS"
                   " WHERE blocking_trx_id = %s")
        else:
            mine = self._one("SELECT pg_current_xact_id()::text", self.conn)
            sql = ("SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid'"
                   " AND NOT granted AND transactionid::text = %s")
        while not self._one(sql, self.monitor, mine):
            assert not task.done(), task
            assert asyncio.get_running_loop().time() < deadline, "the task never blocked"
            # MariaDB refreshes its lock tables only when nobody read them in the last
            # 0.1 s: a faster poll would read the same (stale) rows for ever
            await asyncio.sleep(0.15)

    def _one(self, sql: str, conn: Any, *params: Any) -> Any:
        if self.backend == "mysql":
            with conn.cursor() as cur:
                cur.execute(sql, params or None)
                row = cur.fetchone()
                return None if row is None else row[0]
        return conn.execute(sql, params or None).fetchone()[0]

    def close(self) -> None:
        self.conn.close()
        self.monitor.close()
