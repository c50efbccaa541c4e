"""Server parts built for a test the way ``Server._start`` wires them, in one place.

``pool_for_test(store, handler)`` gives a Pool of queue ``q`` running kind ``k`` with
``handler``, over its own Executor, Completer and thread pool, on a fake store that
has the few methods a pool and its completer call (``PoolStore``). The tests of the
pool (tests/test_pool*.py) build theirs here instead of copying the wiring.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import kiln
from kiln._events import EventHub
from kiln._model._job import JobResult, JobRow, JobState
from kiln._model._kinds import make_kind
from kiln._model._recurring import Recurring
from kiln._server._completer import Completer
from kiln._server._config import ServerConfig
from kiln._server._context import ServerContext
from kiln._server._executor import Executor
from kiln._server._handle import Job
from kiln._server._identity import Identity
from kiln._server._pool import Pool
from kiln._server._threads import ThreadPool
from kiln.stores import Store
from kiln.stores._protocol import ApplyResult, Capabilities

SERVER_ID = "s1"


class PoolStore(Protocol):
    """What a pool and its completer ask of a store (and ``job_claim_watch`` when its
    capabilities say it claims on notifications)."""

    capabilities: Capabilities

    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str
    ) -> list[JobRow]: ...

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult: ...


@dataclasses.dataclass
class PoolParts:
    """A pool and the parts it runs on; ``start()`` and ``stop()`` as a server would."""

    pool: Pool
    executor: Executor
    completer: Completer
    threads: ThreadPool
    events: EventHub
    config: ServerConfig

    async def start(self) -> None:
        await self.completer.start()
        await self.pool.start()

    async def stop(self, settle: float = 0.0) -> None:
        """Stop claiming; give running jobs up to ``settle`` seconds to finish (their
        results are then written); stop the completer and the threads."""
        await self.pool.stop_claiming()
        if settle and self.pool.running:
            await asyncio.wait(list(self.pool.running), timeout=settle)
        await self.completer.stop()
        self.threads.shutdown()


async def no_params(row: JobRow, name: str, value: Any) -> bool:
    """A checkpoint writer that accepts every write and stores nothing."""
    return True


def pool_for_test(
    store: PoolStore,
    handler: Callable[[Job], Any],
    *,
    concurrency: int = 4,
    poll_interval: float = 0.05,
    kill_grace: float = 0.2,
    threads: int = 2,
    events: EventHub | None = None,
) -> PoolParts:
    """A pool of queue ``q`` running kind ``k`` with ``handler``, not started."""
    config = ServerConfig(poll_interval=poll_interval, heartbeat_interval=0.2,
                          kill_grace=kill_grace, dead_after=6, leader_ttl=1)
    hub = events if events is not None else EventHub()
    pool_threads = ThreadPool(threads)
    identity = Identity.named(SERVER_ID)
    # a fake, not a Store: the pool and the completer call only what PoolStore declares
    as_store = cast(Store, store)
    executor = Executor(
        kinds={"k": make_kind("k", handler, queue="q")}, config=config, events=hub,
        threads=pool_threads, identity=identity, write_param=no_params, middleware=[],
    )
    completer = Completer(store=as_store, config=config, events=hub,
                          on_released=lambda released, reason: None)
    pool = Pool(
        queue="q", concurrency=concurrency, kinds=["k"], store=as_store, executor=executor,
        completer=completer, events=hub, identity=identity, poll_interval=poll_interval,
        may_claim=lambda: True,
    )
    return PoolParts(pool=pool, executor=executor, completer=completer,
                     threads=pool_threads, events=hub, config=config)


def context(store: Store, recurring: list[Recurring] | None = None,
            leader_since: float | None = 0.0, **config: Any) -> ServerContext:
    """A ServerContext for the leader's services on ``store``: kind ``k`` of queue ``q``,
    ``recurring`` schedules, ``config``; it records wake-ups in ``ctx.woken`` and their
    reasons in ``ctx.reasons``."""
    woken: list[dict[str, int]] = []
    reasons: list[str] = []  # Server._wake says them as JobsReleased

    def wake(released: dict[str, int], reason: str) -> None:
        woken.append(released)
        reasons.append(reason)

    ctx = ServerContext(
        store=store, config=kiln.ServerConfig(**config), events=EventHub(),
        kinds={"k": make_kind("k", lambda job: None, queue="q", backoff=kiln.Constant(30))},
        identity=Identity.named("leader"), leader_since=lambda: leader_since,
        wake=wake, recurring=recurring or [],
    )
    ctx.woken = woken  # type: ignore[attr-defined]
    ctx.reasons = reasons  # type: ignore[attr-defined]
    return ctx


def row(job_id: int) -> JobRow:
    now = datetime.now(UTC)
    return JobRow(
        id=job_id, queue="q", kind="k", state=JobState.RUNNING, args={}, params={},
        metadata={}, priority=0, run_at=now, attempt=1, max_attempts=3, timeout=None,
        backoff=None, errors=[], created_at=now, admitted_at=None, attempted_at=now,
        finished_at=None, server_id="s1", rate_key=None, rescues=0,
    )
