"""Runs one deploy sequence (tests/deploys/plan.py) on one database, in this process.

A's two servers start and A's producer enqueues. Once one of A's handlers runs, B's
first server starts beside them and both versions' producers enqueue (phase ``ab``).
Once B has run something, or after ``ROLL`` seconds (a rolling deploy keeps both for a
while; how long is part of the scenario, not a wait for a result), A's servers stop as
a SIGTERM stops them: what they still run is cancelled and handed back. B's second
server starts and B's producer enqueues (phase ``b``). Then the queue settles: every
job finished, or nothing moved for ``QUIET`` seconds while nothing ran (what is left
cannot move; the checks say whether it may stay). What kiln says of the jobs left is
read while B's servers still run; then everything stops and every row is read back.

Servers run in-process (tests/integration/inprocess.py): a declaration change is
about what two versions of the code declare, which a worker process would only make
slower to show. A server's publications are amended after it starts when its Version
says so (a newer kiln's options), through the store, as that server would write them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import kiln
import kiln.events
from kiln import JobFilter, JobRow, JobState
from kiln._model._job import KindDeclaration
from kiln.stores import Store
from tests.chaos.harness import all_rows
from tests.chaos.ledger import UNFINISHED
from tests.deploys.plan import Case, Enqueue, Version
from tests.deploys.versions import Ledger, build_app
from tests.integration.inprocess import Running, config, open_store
from tests.support.waits import wait_for

# heartbeat_interval 0.5, not 0.2: a server that fences itself fails the case, and
# three missed beats of 0.2s are too few on a loaded machine; dead_after: the least
# that the rule allows (> 3*0.5 + 0.2 + 5)
CONFIG = config(heartbeat_interval=0.5, dead_after=6.75)
SERVERS = 2  # of each version
ROLL = 0.5  # seconds at most that A and B run side by side
QUIET = 1.5  # seconds without a change, nothing running: the jobs left cannot move
SETTLE = 20.0  # seconds at most for the queue to settle
IN_FLIGHT = 10.0  # seconds at most for A's first handler to start


@dataclasses.dataclass
class Run:
    ledger: Ledger
    marks: dict[str, float]  # phase -> when it began (host clock, as the ledger's)
    groups: list[tuple[Enqueue, list[kiln.EnqueueResult]]]
    rows: dict[int, JobRow] = dataclasses.field(default_factory=dict)
    health: list[kiln.Health] = dataclasses.field(default_factory=list)  # B's, at the end
    reported: int | None = None  # jobs kiln says no live server can claim


class Fleet:
    """The servers of a sequence, numbered in the order they started."""

    def __init__(self, store: Store, ledger: Ledger, cfg: kiln.ServerConfig = CONFIG) -> None:
        self.store = store
        self.ledger = ledger
        self.config = cfg
        self.servers: dict[int, Running] = {}

    async def start(self, app: kiln.App, version: Version) -> int:
        server = app.server(dict(version.queues), self.config)
        number = len(self.servers) + 1
        self.ledger.servers[number] = server
        self.ledger.versions[number] = version.name
        server.events.subscribe(self._recorder(number))
        self.servers[number] = Running(server)
        await self.servers[number].started()
        if version.publishes:
            await self._amend(server, version)
        return number

    async def _amend(self, server: kiln.Server, version: Version) -> None:
        """Publish the server's declarations with the Version's extra options, as a
        newer kiln's server would have published them."""
        amended = []
        for name, extra in version.publishes.items():
            options = {**server.kinds[name].declaration().options, **extra}
            amended.append(KindDeclaration(kind=name, options=options, digest=f"newer-{name}"))
        await self.store.kinds_publish(server.id, server.info.host, server.info.pid, amended)

    def _recorder(self, number: int) -> Callable[[kiln.events.Event], None]:
        def record(event: kiln.events.Event) -> None:
            if isinstance(event, kiln.events.JobFinished):
                self.ledger("result", number, job=event.job.id, attempt=event.job.attempt,
                            outcome=event.outcome.value,
                            error=None if event.error is None else repr(event.error)[:300])
            elif isinstance(event, kiln.events.Fenced):
                self.ledger("fenced", number, server=event.server_id, reason=event.reason)
            elif isinstance(event, kiln.events.Heartbeat):
                self.ledger("heartbeat", number, ok=event.ok, age=event.age)
            elif isinstance(event, kiln.events.MaintenanceRan):
                self.ledger("maintenance", number, service=event.service, counts=event.counts)
            elif isinstance(event, kiln.events.ResultPoisoned):
                self.ledger("poisoned", number, job=event.job_id, outcome=event.outcome.value,
                            error=repr(event.error)[:300])

        return record

    async def stop(self, number: int) -> None:
        """Stop one server as SIGTERM would; logged as the ledger's ``term`` fault."""
        began = time.time()
        await self.servers[number].stop()
        self.ledger("fault", number, type="term", target=number, began=began,
                    until=time.time())

    def of(self, version: str) -> list[int]:
        return [n for n in self.servers if self.ledger.versions[n] == version]

    async def close(self) -> None:
        for running in self.servers.values():
            if not running.task.done():
                running.server.stop()
        await asyncio.gather(*(r.task for r in self.servers.values()),
                             return_exceptions=True)


def started_by(ledger: Ledger, version: str) -> bool:
    return any(ln["ev"] == "start" and ledger.versions.get(ln["pid"]) == version
               for ln in ledger.lines)


async def unclaimable(client: kiln.Client) -> int | None:
    """How many waiting jobs kiln itself reports no live server can claim
    (``client.unhandled()``, which ``kiln kinds`` and ``kiln_jobs_unhandled`` show)."""
    return sum(u.jobs for u in await client.unhandled(float(CONFIG.dead_after)))


async def settle(store: Store) -> None:
    """Until no job is unfinished, or nothing changed for QUIET seconds while no job
    ran, or SETTLE seconds passed."""
    deadline = time.monotonic() + SETTLE
    last: list[tuple[int, str, int]] | None = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        rows = await store.job_list(JobFilter(states=tuple(UNFINISHED)), limit=1000)
        if not rows:
            return
        now = time.monotonic()
        snapshot = sorted((r.id, r.state.value, r.attempt) for r in rows)
        if snapshot != last:
            last, since = snapshot, now
        elif now - since >= QUIET and all(r.state is not JobState.RUNNING for r in rows):
            return
        await asyncio.sleep(0.05)


class Sequence:
    def __init__(self, case: Case, url: str, store: Store) -> None:
        self.case = case
        self.url = url
        self.store = store
        self.ledger = Ledger()
        self.apps = {"a": build_app(url, case.a, self.ledger),
                     "b": build_app(url, case.b, self.ledger)}
        self.bare = {"a": kiln.App(url), "b": kiln.App(url)}  # producers without handlers
        self.fleet = Fleet(store, self.ledger)
        self.run = Run(self.ledger, {}, [])

    async def produce(self, phase: str) -> None:
        self.run.marks.setdefault(phase, time.time())  # "ab" and "b": set before
        for group in self.case.jobs:
            if group.phase != phase:
                continue
            app = (self.bare if group.bare else self.apps)[group.by]
            ids = [await app.aenqueue(group.kind, dict(args)) for args in group.args]
            self.run.groups.append((group, ids))

    async def roll(self) -> None:
        """B beside A for a while: until B ran something, at most ROLL seconds."""
        deadline = time.monotonic() + ROLL
        while not started_by(self.ledger, "b") and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def play(self) -> Run:
        case, fleet = self.case, self.fleet
        for _ in range(SERVERS):
            await fleet.start(self.apps["a"], case.a)
        await self.produce("a")
        await wait_for(lambda: started_by(self.ledger, "a"), IN_FLIGHT, "A's first handler")
        self.run.marks["ab"] = time.time()
        await fleet.start(self.apps["b"], case.b)
        await self.produce("ab")
        await self.roll()
        await asyncio.gather(*(fleet.stop(n) for n in fleet.of("a")))
        self.run.marks["b"] = time.time()
        for _ in range(SERVERS - 1):
            await fleet.start(self.apps["b"], case.b)
        await self.produce("b")
        await settle(self.store)
        self.run.health = [fleet.servers[n].server.healthy() for n in fleet.of("b")]
        self.run.reported = await unclaimable(self.apps["b"].client())
        await asyncio.gather(*(fleet.stop(n) for n in fleet.of("b")))
        self.run.rows = await all_rows(self.store)
        return self.run

    async def close(self) -> None:
        await self.fleet.close()
        for app in (*self.apps.values(), *self.bare.values()):
            await app.aclose()


async def play(case: Case, url: str) -> Run:
    store = await open_store(url)
    sequence = Sequence(case, url, store)
    try:
        return await sequence.play()
    finally:
        await sequence.close()
        await store.close()

