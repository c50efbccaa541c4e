"""One chaos run: workers, a producer, faults drawn from a seed, settling, accounting.

The CI form (tests/chaos/test_chaos.py) and the long form (bench/chaos.py) both call
``run``; they differ only in the figures of ``Spec``. A run is bounded in time
everywhere (worker start, every fault, settling, shutdown) and kills every worker's
process group in its ``finally``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kiln import Client, JobFilter, JobRow, NewJob, UnreachableError
from kiln.stores import Store, store_from_url
from tests.chaos import app as chaos_app
from tests.chaos.cluster import Cluster, Restartable, Worker
from tests.chaos.ledger import UNFINISHED, account

# dead_after > 3*heartbeat_interval + kill_grace + 5s: 6.5 > 3*0.25 + 0.2 + 5 = 5.95
CONFIG: dict[str, Any] = {
    "poll_interval": 0.2,
    "heartbeat_interval": 0.25,
    "kill_grace": 0.2,
    "dead_after": 6.5,
    "leader_ttl": 1.0,
    "shutdown_timeout": 1.0,
}
LINGER = 1.5
NETWORK = ("cut", "db_outage", "db_restart")
WEIGHTS = {"kill": 3, "term": 2, "stop": 1, "cut": 2, "db_outage": 1, "db_restart": 1}


@dataclasses.dataclass
class Spec:
    url: str
    seed: int
    tmp: Path
    duration: float = 15.0  # seconds of faults
    workers: int = 3
    jobs: int = 120
    concurrency: int = 4
    faults: tuple[str, ...] = ("kill", "term", "stop", "cut", "db_outage")
    settle_timeout: float = 40.0
    db: Restartable | None = None  # what a db_restart restarts
    first: str | None = None  # the first fault's type, instead of one drawn from the seed
    producers: int = 1  # producers enqueueing side by side, each on a store of its own
    producer_conns: int | None = None  # each producer's pool (None: the store's default)
    config: dict[str, Any] | None = None  # ServerConfig fields over CONFIG's

    @property
    def server_config(self) -> dict[str, Any]:
        return {**CONFIG, **(self.config or {})}

    @property
    def backend(self) -> str:
        return urlsplit(self.url).scheme


def faults_for(backend: str, real_restart: bool = False) -> tuple[str, ...]:
    """SQLite has no network to cut: kills and stops only. A real restart needs a
    private server (tests/chaos/dbserver.py)."""
    if backend == "sqlite":
        return ("kill", "term", "stop")
    return ("kill", "term", "stop", "cut", "db_outage", *(("db_restart",) if real_restart else ()))


class Chaos:
    def __init__(self, spec: Spec, store: Store, cluster: Cluster) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.store = store
        self.cluster = cluster
        self.client = Client(store, chaos_app.build_app(spec.url, cluster.log).kinds)
        self.ids: list[int] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.db_lock = asyncio.Lock()  # a real restart waits for an insert in flight
        self.net_busy = False
        self.errors: list[str] = []  # faults the harness failed to carry out
        self.config = spec.server_config
        self.fence_after = 3 * self.config["heartbeat_interval"]

    def _background(self, coro: Any) -> None:
        task = asyncio.create_task(coro, name=coro.__qualname__)  # errors name the fault
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(f"{task.get_name()}: {task.exception()!r}")

    def _job(self) -> tuple[str, dict[str, Any]]:
        r = self.rng.random()
        if r < 0.15:
            return "chaos.limited", {}
        args = {"steps": self.rng.randint(2, 6), "step": round(self.rng.uniform(0.05, 0.4), 3)}
        return ("chaos.steps_sync" if r < 0.4 else "chaos.steps"), args

    async def produce(self) -> None:
        """Enqueue the jobs in batches over the first 80% of the fault window, from
        ``producers`` producers side by side: the first on the harness's store, each
        other on a store (and pool) of its own."""
        count = self.spec.producers
        shares = [self.spec.jobs // count + (i < self.spec.jobs % count) for i in range(count)]
        if count == 1:
            await self._produce(self.client, shares[0])
            return
        clients = [Client(_store_for(self.spec), self.client.kinds) for _ in range(count)]
        try:
            await asyncio.gather(*(self._produce(c, n) for c, n in zip(clients, shares,
                                                                         strict=True)))
        finally:
            for client in clients:
                await client.close()

    async def _produce(self, client: Client, jobs_count: int) -> None:
        batches = max(1, int(self.spec.duration * 0.8 / 0.5))
        per = -(-jobs_count // batches)
        left = jobs_count
        while left > 0:
            jobs = [client.build(*self._job()) for _ in range(min(per, left))]
            self.ids += await self._insert(jobs, client)
            left -= len(jobs)
            await asyncio.sleep(0.5)

    async def _insert(self, jobs: list[NewJob], client: Client | None = None) -> Sequence[int]:
        """Insert, again if a pooled connection died in a restart before this insert began.

        The lock keeps restarts out while an insert runs, so an insert that failed went
        to a server that was already gone and committed nothing: trying again adds no
        job twice (and the accounting covers every row in the table, known or not).
        """
        for i in range(20):
            async with self.db_lock:
                try:
                    return await (client or self.client).enqueue_many(jobs)
                except UnreachableError:
                    if i == 19:
                        raise
            await asyncio.sleep(0.2)
        raise AssertionError("unreachable")

    def _target(self) -> Worker | None:
        free = [w for w in self.cluster.alive() if w.ready and not w.busy]
        if len(free) < 2:  # keep one worker untouched, so someone can rescue
            return None
        leader = self.cluster.leader()
        if leader in free and self.rng.random() < 0.3:
            return leader
        return self.rng.choice(free)

    def inject(self, kind: str | None = None) -> bool:
        """Start one fault (of type ``kind``, or drawn); False if none could start now."""
        types = self.spec.faults
        kind = kind or self.rng.choices(types, [WEIGHTS[t] for t in types])[0]
        if kind in NETWORK and self.net_busy:
            return False
        if kind in ("db_outage", "db_restart"):
            self._background(self._network(kind, None))
            return True
        target = self._target()
        if target is None:
            return False
        if kind == "kill":
            self._background(self.cluster.kill(target))
        elif kind == "term":
            grace = self.config["shutdown_timeout"] + self.config["kill_grace"] + 10.0
            self._background(self.cluster.term(target, grace))
        elif kind == "stop":
            if any(w.busy for w in self.cluster.alive()):
                return False
            seconds = self.config["dead_after"] + self.rng.uniform(0.5, 1.5)
            self._background(self.cluster.stop(target, seconds))
        else:
            self._background(self._network("cut", target))
        return True

    async def _network(self, kind: str, target: Worker | None) -> None:
        self.net_busy = True
        try:
            if kind == "cut":
                assert target is not None
                long = self.rng.random() < 0.5
                fence_after, dead_after = self.fence_after, self.config["dead_after"]
                seconds = (self.rng.uniform(fence_after + 0.5, dead_after + 2)
                           if long else self.rng.uniform(0.1, fence_after))
                await self.cluster.cut(target, seconds, drop=self.rng.random() < 0.5)
            elif kind == "db_outage":
                await self.cluster.outage(self.rng.uniform(0.5, 3.0))
            else:
                assert self.spec.db is not None
                async with self.db_lock:
                    await self.cluster.restart(self.spec.db, self.rng.uniform(0.5, 3.0),
                                               crash=self.rng.random() < 0.5)
        finally:
            self.net_busy = False

    def tour(self) -> list[str]:
        """Every fault type once, in an order drawn from the seed (``first`` first)."""
        rest = [t for t in self.spec.faults if t != self.spec.first]
        return ([self.spec.first] if self.spec.first else []) + self.rng.sample(rest, len(rest))

    async def storm(self) -> None:
        """Faults for ``duration`` seconds: the tour first (at each tick, the first of its
        faults that can start now; it runs on past the window until done, so that every
        run has every type, for at most another ``duration``), then faults drawn at random."""
        end = time.monotonic() + self.spec.duration
        tour = self.tour()
        while time.monotonic() < end or (tour and time.monotonic() < end + self.spec.duration):
            await asyncio.sleep(self.rng.uniform(0.3, 1.2))
            if not tour:
                self.inject()
                continue
            started = next((t for t in tour if self.inject(t)), None)
            if started is not None:
                tour.remove(started)
        while self.tasks:
            await asyncio.wait(list(self.tasks))

    async def settle(self) -> float | None:
        """Seconds until no job is left unfinished, or None if it took too long."""
        while len(self.cluster.alive()) < self.spec.workers:
            await self.cluster.start()
        began = time.monotonic()
        unfinished = JobFilter(states=tuple(UNFINISHED))
        while time.monotonic() - began < self.spec.settle_timeout:
            if await retrying(lambda: self.store.job_count(unfinished)) == 0:
                return time.monotonic() - began
            await asyncio.sleep(0.2)
        return None


def _store_for(spec: Spec) -> Store:
    if spec.producer_conns is None:
        return store_from_url(spec.url)
    return store_from_url(spec.url, max_conns=spec.producer_conns)


def _quiet_cancelled(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The proxy cancels its connection tasks when it cuts them, and asyncio's stream
    callback then reports each as an error (Python 3.11): not worth a traceback."""
    if isinstance(context.get("exception"), asyncio.CancelledError):
        return
    loop.default_exception_handler(context)


async def retrying(call: Callable[[], Any], tries: int = 50) -> Any:
    """A read from the harness, repeated while its connection comes back from a restart."""
    for i in range(tries):
        try:
            return await call()
        except Exception:
            if i == tries - 1:
                raise
            await asyncio.sleep(0.2)


async def all_rows(store: Store) -> dict[int, JobRow]:
    rows: dict[int, JobRow] = {}
    before: int | None = None
    while True:
        page = await store.job_list(JobFilter(), limit=1000, before_id=before)
        rows.update((r.id, r) for r in page)
        if len(page) < 1000:
            return rows
        before = min(r.id for r in page)


async def run(spec: Spec) -> dict[str, Any]:
    """One run; returns the run's JSON-able figures (``violations`` lists every problem)."""
    asyncio.get_running_loop().set_exception_handler(_quiet_cancelled)
    store = store_from_url(spec.url)
    await store.open()
    await store.migrate()
    config = spec.server_config
    cluster = Cluster(spec.url, spec.tmp, spec.concurrency, config)
    began = time.monotonic()
    try:
        await asyncio.gather(*(cluster.start() for _ in range(spec.workers)))
        chaos = Chaos(spec, store, cluster)
        producer = asyncio.create_task(chaos.produce())
        await chaos.storm()
        await producer
        settled = await chaos.settle()
        await asyncio.sleep(LINGER)  # a process woken by the last SIGCONT acts (or not)
        crashed = cluster.crashed()
        await cluster.stop_all(timeout=config["shutdown_timeout"] + 5.0)
        rows = await retrying(lambda: all_rows(store))
    finally:
        await cluster.close()
        await store.close()
    lines = cluster.lines()
    result = account(lines, rows, sorted(set(chaos.ids) | set(rows)),
                     config["dead_after"], chaos_app.LIMIT, "chaos.limited")
    result["violations"] += crashed + [f"harness: {e}" for e in chaos.errors]
    hung = [ln for ln in lines if ln["ev"] == "term_hung"]
    if hung:
        result["violations"].append(f"{len(hung)} workers ignored SIGTERM: {hung}")
    if settled is None:
        result["violations"].append(f"the queue did not settle in {spec.settle_timeout}s")
    return {
        "seed": spec.seed, "backend": spec.backend, "duration": spec.duration,
        "workers": spec.workers, "jobs": len(chaos.ids), "faults": result["faults"],
        "self_fences": result["self_fences"],
        "executions": result["executions"], "duplicates": result["duplicates"],
        "duplicate_causes": result["causes"], "ended_twice": result["ended_twice"],
        "lost": len(result["lost"]), "stuck": len(result["stuck"]),
        "double_completed": len(result["double_completed"]),
        "unaccounted": len(result["unaccounted"]), "overlaps": result["overlaps"],
        "woken_completions": result["woken_completions"],
        "rate_checked": result["rate_checked"],
        "settle_seconds": None if settled is None else round(settled, 2),
        "wall_seconds": round(time.monotonic() - began, 1),
        "violations": result["violations"],
    }
