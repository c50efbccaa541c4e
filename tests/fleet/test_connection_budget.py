"""How many connections a kiln process holds in each mode (issue 41 item 5), counted
where the connections arrive: PostgreSQL's pg_stat_activity for the direct ones,
PgBouncer's ``SHOW CLIENTS`` for those to the pooler, both by ``application_name`` (the
process's own, given in its URLs), sampled every 20 ms while a server drains jobs whose
handlers checkpoint and enqueue through the App (its client store beside the server's).

The peaks must stay within the budget docs/scaling.md's table states, and once the drain
is over the count the process reports (``Server.connections()``, which its heartbeat
writes for ``kiln servers``) must be what the database and the pooler see.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections import Counter

import psycopg
import pytest

import kiln
from tests.integration.inprocess import Running, config
from tests.plugins.databases import POSTGRES_URL
from tests.plugins.pgbouncer import PgBouncer
from tests.support.waits import wait_for


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str
    max_conns: int
    pooled: bool  # statements through PgBouncer in transaction mode
    listen_url: bool  # LISTEN on a direct URL
    # the budget (docs/scaling.md): server store + App client store (+ LISTEN)
    to_pooler: int
    direct: int


MODES = [
    Mode("direct-default", 8, pooled=False, listen_url=False, to_pooler=0, direct=8 + 8 + 1),
    Mode("direct-pool-2", 2, pooled=False, listen_url=False, to_pooler=0, direct=2 + 2 + 1),
    Mode("transaction-polling", 2, pooled=True, listen_url=False, to_pooler=2 + 2, direct=0),
    Mode("transaction-listen-url", 2, pooled=True, listen_url=True, to_pooler=2 + 2,
         direct=1),
    Mode("transaction-pool-1", 1, pooled=True, listen_url=True, to_pooler=1 + 1, direct=1),
]


def _direct(database: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return POSTGRES_URL.rsplit("/", 1)[0] + f"/{database}" + (f"?{query}" if query else "")


class Sampler:
    """Counts one application_name's connections, at PostgreSQL and at PgBouncer."""

    def __init__(self, name: str, database: str, bouncer: PgBouncer) -> None:
        self.name = name
        self.database = database
        self.bouncer = bouncer
        self.peak: Counter[str] = Counter()
        self.samples = 0
        self.bouncers: set[int] = set()  # every server pid PgBouncer has listed

    async def count(self, conn: psycopg.AsyncConnection) -> tuple[int, int]:
        """(direct, to the pooler): PgBouncer's own server connections carry the name
        of the client they last served, so they are not counted as direct. Its server
        list is read before and after PostgreSQL's: a server connection PgBouncer opens
        meanwhile is in the second (read alone, the first missed it, and a loaded run
        counted it as a direct connection), and every pid it listed before is kept: one
        it has just closed may still be ending at PostgreSQL."""
        clients = await asyncio.to_thread(self.bouncer.admin, "SHOW CLIENTS")
        pooled = sum(1 for c in clients if c.get("application_name") == self.name)
        before = await asyncio.to_thread(self.bouncer.admin, "SHOW SERVERS")
        cur = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            " AND application_name = %s AND pid <> pg_backend_pid()",
            (self.database, self.name))
        pids = {int(r[0]) for r in await cur.fetchall()}
        after = await asyncio.to_thread(self.bouncer.admin, "SHOW SERVERS")
        self.bouncers |= {int(s["remote_pid"]) for s in [*before, *after]}
        return len(pids - self.bouncers), pooled

    async def run(self, stop: asyncio.Event) -> None:
        async with await psycopg.AsyncConnection.connect(
            _direct(self.database, application_name="budget-sampler"), autocommit=True
        ) as conn:
            while not stop.is_set():
                direct, pooled = await self.count(conn)
                self.peak["direct"] = max(self.peak["direct"], direct)
                self.peak["pooler"] = max(self.peak["pooler"], pooled)
                self.samples += 1
                await asyncio.sleep(0.02)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
async def test_a_process_holds_the_connections_its_mode_budgets(
    mode: Mode, pgbouncer: PgBouncer, pg_database: str,
) -> None:
    name = f"budget-{uuid.uuid4().hex[:8]}"
    options: dict[str, str] = {}
    if mode.pooled:
        url = pgbouncer.url(pg_database, pooler="transaction", application_name=name)
        if mode.listen_url:
            options["listen_url"] = _direct(pg_database, application_name=name)
    else:
        url = _direct(pg_database, application_name=name)
    app = kiln.App(url, max_conns=mode.max_conns, **options)  # type: ignore[arg-type]

    @app.job("checkpoint")
    async def checkpoint(job: kiln.Job) -> None:
        for step in range(2):
            await job.set_param("step", step)

    @app.job("fanout")
    async def fanout(job: kiln.Job) -> None:
        await app.aenqueue("checkpoint", {"from": job.id})

    await app.amigrate()
    sampler = Sampler(name, pg_database, pgbouncer)
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    running = await Running(app.server({"default": 20}, config())).started()
    try:
        await app.aenqueue_many([("fanout", {}) for _ in range(150)])
        await wait_for(lambda: len(running.finished()) >= 300 or None, 60,
                       "the jobs and the jobs they enqueued to finish")
        # on a loaded machine the jobs may finish within a few samples: go on sampling
        # the running process (its pools stay open) until ten were taken
        await wait_for(lambda: sampler.samples >= 10 or None, 30, "ten samples")

        async def agree() -> tuple[int, int, int] | None:
            direct, pooled = await sampler.count(conn)
            held = running.server.connections()
            return (held, direct, pooled) if held == direct + pooled else None

        async with await psycopg.AsyncConnection.connect(
            _direct(pg_database, application_name="budget-check"), autocommit=True
        ) as conn:
            held, direct, pooled = await wait_for(
                agree, 10, "the process's count to be what PostgreSQL and PgBouncer see")
    finally:
        stop.set()
        await sampling
        await running.stop()
        await app.aclose()
    print(f"{mode.name}: peak {sampler.peak['pooler']} to the pooler,"
          f" {sampler.peak['direct']} direct ({sampler.samples} samples); at rest the"
          f" process says {held} = {pooled} + {direct}")
    assert sampler.samples >= 10
    assert sampler.peak["pooler"] <= mode.to_pooler
    assert sampler.peak["direct"] <= mode.direct
    if mode.pooled:
        assert sampler.peak["pooler"] >= 1
    if not mode.pooled or mode.listen_url:
        assert sampler.peak["direct"] >= 1

