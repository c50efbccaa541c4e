"""Micro-benchmark of MySQL/MariaDB drivers for kiln's hot paths (see docs/adr/0003).

Compares asyncmy, aiomysql and PyMySQL (sync, in a thread pool) on the two round
trips that dominate a busy server: a single-row INSERT, and a claim transaction
(``SELECT ... FOR UPDATE SKIP LOCKED`` then ``UPDATE``). Each driver runs the same
statements, sequentially and with 4 concurrent workers, against a scratch database.

    python bench/bench_mysql_drivers.py [--url mysql://root@127.0.0.1:3306/test] [--n 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

DDL = (
    "CREATE TABLE {t} (id BIGINT AUTO_INCREMENT PRIMARY KEY, queue VARCHAR(64) NOT NULL,"
    " state VARCHAR(16) NOT NULL, args JSON NOT NULL, attempt INT NOT NULL DEFAULT 0,"
    " server_id VARCHAR(64), attempted_at DATETIME(6),"
    " KEY claim (state, queue, id)) ENGINE=InnoDB"
)
INSERT = "INSERT INTO {t} (queue, state, args) VALUES (%s, 'available', %s)"
CLAIM = (
    "SELECT id FROM {t} WHERE state = 'available' AND queue = %s ORDER BY id LIMIT 1"
    " FOR UPDATE SKIP LOCKED"
)
MARK = (
    "UPDATE {t} SET state = 'running', attempt = attempt + 1,"
    " attempted_at = UTC_TIMESTAMP(6), server_id = %s WHERE id = %s"
)


def conn_args(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "host": parts.hostname or "127.0.0.1", "port": parts.port or 3306,
        "user": parts.username or "root", "password": parts.password or "",
    }


# async drivers ---------------------------------------------------------------------
async def _async_conn(driver: str, args: dict[str, Any], db: str) -> Any:
    if driver == "asyncmy":
        import asyncmy

        return await asyncmy.connect(**args, database=db, autocommit=True)
    import aiomysql

    return await aiomysql.connect(**args, db=db, autocommit=True)


async def _async_insert(conn: Any, t: str) -> None:
    async with conn.cursor() as cur:
        await cur.execute(INSERT.format(t=t), ("q", '{"n": 1}'))


async def _async_claim(conn: Any, t: str) -> None:
    async with conn.cursor() as cur:
        await cur.execute("START TRANSACTION")
        await cur.execute(CLAIM.format(t=t), ("q",))
        rows = await cur.fetchall()
        if rows:
            await cur.execute(MARK.format(t=t), ("bench", rows[0][0]))
        await cur.execute("COMMIT")


async def _async_run(
    driver: str, args: dict[str, Any], db: str, t: str, n: int, workers: int
) -> dict[str, float]:
    conns = [await _async_conn(driver, args, db) for _ in range(workers)]
    out: dict[str, float] = {}
    for name, op in (("insert", _async_insert), ("claim", _async_claim)):
        out[name] = await _async_timed(conns, op, t, n)
    for c in conns:
        c.close()
    return out


async def _async_timed(
    conns: list[Any], op: Callable[[Any, str], Awaitable[None]], t: str, n: int
) -> float:
    per = n // len(conns)

    async def worker(conn: Any) -> None:
        for _ in range(per):
            await op(conn, t)

    began = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    return per * len(conns) / (time.perf_counter() - began)


# sync driver in threads -----------------------------------------------------------
def _sync_run(args: dict[str, Any], db: str, t: str, n: int, workers: int) -> dict[str, float]:
    import pymysql

    conns = [pymysql.connect(**args, database=db, autocommit=True) for _ in range(workers)]

    def insert(conn: Any) -> None:
        with conn.cursor() as cur:
            cur.execute(INSERT.format(t=t), ("q", '{"n": 1}'))

    def claim(conn: Any) -> None:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION")
            cur.execute(CLAIM.format(t=t), ("q",))
            rows = cur.fetchall()
            if rows:
                cur.execute(MARK.format(t=t), ("bench", rows[0][0]))
            cur.execute("COMMIT")

    out: dict[str, float] = {}
    per = n // workers
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for name, op in (("insert", insert), ("claim", claim)):

            async def one(conn: Any, op: Callable[[Any], None] = op) -> None:
                loop = asyncio.get_running_loop()
                for _ in range(per):
                    await loop.run_in_executor(pool, op, conn)  # as an async store would

            async def all_workers() -> None:
                await asyncio.gather(*(one(c) for c in conns))

            began = time.perf_counter()
            asyncio.run(all_workers())
            out[name] = per * workers / (time.perf_counter() - began)
    for c in conns:
        c.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="mysql://root@127.0.0.1:3306/test")
    parser.add_argument("--n", type=int, default=2000)
    ns = parser.parse_args()
    import pymysql

    args = conn_args(ns.url)
    db = f"kiln_bench_{uuid.uuid4().hex[:8]}"
    admin = pymysql.connect(**args, autocommit=True)
    admin.cursor().execute(f"CREATE DATABASE {db}")
    try:
        print(f"{'driver':<22}{'workers':>8}{'insert/s':>12}{'claim/s':>12}")
        for driver in ("asyncmy", "aiomysql", "pymysql+threads"):
            for workers in (1, 4):
                t = f"j_{driver[:5]}_{workers}".replace("+", "_")
                admin.cursor().execute(f"USE {db}")
                admin.cursor().execute(DDL.format(t=t))
                if driver == "pymysql+threads":
                    res = _sync_run(args, db, t, ns.n, workers)
                else:
                    res = asyncio.run(_async_run(driver, args, db, t, ns.n, workers))
                print(f"{driver:<22}{workers:>8}{res['insert']:>12.0f}{res['claim']:>12.0f}")
    finally:
        admin.cursor().execute(f"DROP DATABASE {db}")
        admin.close()


if __name__ == "__main__":
    main()
