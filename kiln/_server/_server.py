"""Server: assembles pools, the completer, heartbeat, elector and services, and runs
them until shutdown. It implements none of them: it builds the parts, hands each its
collaborators, starts them in order, and keeps its lifecycle (kiln._server._state).

Shutdown (SIGTERM, SIGINT, ``stop()`` or cancelling ``run()``) is the Stopper's
sequence (kiln._server._stopper): no job is lost. A second signal skips the wait.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from kiln._client._bus import Bus
from kiln._client._client import Client
from kiln._errors import ConfigError
from kiln._events import EventHub
from kiln._model._concurrency import Concurrency, check_queue_limit
from kiln._model._job import ServerInfo
from kiln._model._kinds import Kind
from kiln._model._recurring import Recurring
from kiln._server import maintenance
from kiln._server._canceller import Canceller
from kiln._server._completer import Completer
from kiln._server._config import ServerConfig, check_queues
from kiln._server._context import ServerContext
from kiln._server._declarations import Declarations
from kiln._server._elector import Elector
from kiln._server._executor import Executor, Middleware
from kiln._server._governor import Governor
from kiln._server._handle_store import HandleStore
from kiln._server._health import Counters, Health, health_of, stuck_reasons
from kiln._server._heartbeat import Heartbeater
from kiln._server._identity import Identity, new_server_id
from kiln._server._job_logs import JobLog
from kiln._server._misfiled import misfiled_key
from kiln._server._notifier import Notifier
from kiln._server._pool import Pool
from kiln._server._reconciler import Reconciler
from kiln._server._releaser import Releaser
from kiln._server._service import Service
from kiln._server._signals import Signals, StopRequest, run_in_new_loop
from kiln._server._state import ServerState
from kiln._server._stats import ServerStats, queue_stats, server_stats
from kiln._server._stopper import Stopper
from kiln._server._threads import ThreadPool
from kiln._server.maintenance.admitter import Admitter
from kiln._version import VERSION
from kiln.stores import Store

log = logging.getLogger("kiln.server")


class Server:
    """Claims and runs jobs of the given queues with the given kinds' handlers, keeps
    its heartbeat, takes part in the leader election and runs the leader's services.

    Built by ``app.server({"default": 10}, config)``; ``await server.run()`` (or
    ``run_sync()``) runs until ``stop()`` or a signal, then shuts down without losing a
    job (see the module docstring). ``healthy()`` and ``stats()`` report from memory;
    ``events`` is the hub kilnotel subscribes to; ``client`` reads the fleet.
    """

    def __init__(
        self,
        store: Store,
        kinds: Mapping[str, Kind],
        queues: Mapping[str, int],
        config: ServerConfig | None = None,
        *,
        bus: Bus | None = None,
        middleware: Sequence[Middleware] = (),
        recurring: Sequence[Recurring] = (),
        events: EventHub | None = None,
        queue_limits: Mapping[str, Concurrency] | None = None,
        connections: Callable[[], int] | None = None,
    ) -> None:
        self.config = config or ServerConfig()
        # a queue's global limit (kiln.Concurrency), declared in the store at start
        self.queue_limits = {q: check_queue_limit(q, c) for q, c in (queue_limits or {}).items()}
        self.queues = check_queues(queues)
        if not kinds:
            raise ConfigError("kinds", [], "a server needs at least one job kind with a handler")
        self._store = store
        self._other_connections = connections  # the process's besides this store's (App)
        self._client: Client | None = None
        self.kinds = dict(kinds)
        self.bus = bus
        self.events = events or EventHub()
        self.counters = Counters()
        self.events.subscribe(self.counters)
        self.events.subscribe(JobLog())  # the worker's log lines about its jobs
        self._middleware: list[Middleware] = list(middleware)
        self.recurring = list(recurring)
        host = socket.gethostname()
        # this server's registration, held by every part; a rejoin changes it there
        self._identity = Identity(ServerInfo(
            id=new_server_id(host), host=host, pid=os.getpid(), queues=self.queues,
            kinds=sorted(self.kinds), version=VERSION, started_at=datetime.now(UTC),
        ))
        self._stop = StopRequest()
        self._state = ServerState.NEW
        self._pools: dict[str, Pool] = {}
        self._services: list[Service] = []
        self._threads: ThreadPool | None = None
        self._completer: Completer | None = None
        self._heartbeat: Heartbeater | None = None
        self._elector: Elector | None = None
        self._releaser: Releaser | None = None
        self._canceller: Canceller | None = None
        self._governor: Governor | None = None
        self._stopper: Stopper | None = None
        self._signals = Signals(
            request=self._stop, stopping=lambda: self._state is ServerState.STOPPING
        )
        self._notifier = Notifier(store=store, events=self.events, bus=bus, pools=self._pools)
        self._declarations = Declarations(
            store=store, identity=self._identity, kinds=self.kinds, queues=self.queues,
            queue_limits=self.queue_limits, dead_after=float(self.config.dead_after),
        )

    # public ------------------------------------------------------------------------
    @property
    def id(self) -> str:
        """This server's id; a new one after a rejoin (kiln._server._identity)."""
        return self._identity.id

    @property
    def info(self) -> ServerInfo:
        """This server's registration, as it last wrote it."""
        return self._identity.info

    def use(self, middleware: Middleware) -> None:
        """Wrap every job execution: ``async def mw(job, call_next) -> result``."""
        if self._state is not ServerState.NEW:
            raise RuntimeError("add middleware before the server runs")
        self._middleware.append(middleware)

    def stop(self, force: bool = False) -> None:
        """Ask for a graceful shutdown (thread-safe); ``force`` skips the waiting."""
        self._stop.ask(force)

    @property
    def state(self) -> str:
        """``new``, ``running``, ``stopping`` or ``stopped`` (as in ``stats().state``,
        without building the rest of the snapshot)."""
        return self._state.value

    @property
    def is_leader(self) -> bool:
        return bool(self._elector and self._elector.is_leader)

    @property
    def client(self) -> Client:
        """A client over this server's own connections: the fleet reads (counts, sizes,
        servers) that kilnotel and probes make, and enqueue and admin as anywhere."""
        if self._client is None:
            self._client = Client(self._store, self.kinds, bus=self.bus, events=self.events)
        return self._client

    @property
    def running_jobs(self) -> int:
        return sum(len(p.running) for p in self._pools.values())

    def healthy(self) -> Health:
        return health_of(
            state=self._state, config=self.config, heartbeat=self._heartbeat,
            completer=self._completer, stuck=self._stuck_reasons(),
            failures=self._store.failures(),
        )

    def _stuck_reasons(self) -> list[str]:
        if self._state is not ServerState.RUNNING or self._threads is None:
            return []
        slots = {q: (p.concurrency, len(p.lingering)) for q, p in self._pools.items()}
        return stuck_reasons(slots, self._executor.sync.stuck, self._threads.size)

    def connections(self) -> int:
        """The database connections this server's process holds now, from memory: its
        store's, and those ``connections`` (given by the App: its clients' stores)
        counts. The heartbeat writes it for `kiln servers` and the dashboard."""
        other = self._other_connections() if self._other_connections is not None else 0
        return self._store.connections() + other

    def stats(self) -> ServerStats:
        """A snapshot of this server, from memory: it never queries the database."""
        # keys with pending jobs and no declared rate limit, as this server's admitter
        # last saw them: their jobs wait until someone declares the key
        undeclared = sum(len(s.undeclared) for s in self._services if isinstance(s, Admitter))
        return server_stats(
            server_id=self.id, state=self._state, leader=self.is_leader,
            queues=queue_stats(self._pools, self.queues), counters=self.counters,
            completer=self._completer, heartbeat=self._heartbeat, events=self.events,
            notifications=self._notifier.notified(),
            threads_stuck=self._executor.sync.stuck if self._threads is not None else 0,
            rate_keys_undeclared=undeclared, connections=self.connections(),
        )

    def run_sync(self) -> None:
        """Run until SIGTERM/SIGINT in a fresh event loop (scripts, the CLI)."""
        run_in_new_loop(self.run())

    # running -----------------------------------------------------------------------
    async def run(self) -> None:
        if self._state is not ServerState.NEW:
            raise RuntimeError(f"a server runs once; this one is {self._state.value}")
        self._stop.bind()
        cancelled = False
        # signals first: a SIGTERM that arrives while the server starts (after its pools
        # may have claimed jobs) must shut it down gracefully, not kill the process
        self._signals.install()
        try:
            await self._store.open()
            await self._store.schema_check()
            try:
                await self._start()
            except BaseException:
                # whatever did start (completer, heartbeat, services, pools) must stop, and
                # jobs a pool claimed go back: no kiln task may outlive a failed run()
                log.exception("server %s failed to start; stopping what started", self.id)
                await self._shutdown()
                raise
            try:
                await self._stop.wait()
            except asyncio.CancelledError:
                cancelled = True
            await self._shutdown()
        finally:
            self._signals.remove()
            await self._close()
        if cancelled:
            raise asyncio.CancelledError

    async def _start(self) -> None:
        cfg = self.config
        self._threads = ThreadPool(cfg.sync_threads or sum(self.queues.values()))
        self._completer = Completer(
            store=self._store, config=cfg, events=self.events,
            on_released=self._notifier.wake, on_scheduled=self._notifier.scheduled,
            on_applied=self._notifier.wake_limited,
        )
        self._executor = executor = self._executor_of(cfg, self._threads)
        self._stopper = Stopper(
            store=self._store, config=cfg, events=self.events, identity=self._identity,
            pools=self._pools, executor=executor, completer=self._completer,
            forced=lambda: self._stop.forced,
        )
        self._heartbeat = Heartbeater(
            store=self._store, identity=self._identity, config=cfg, events=self.events,
            on_fence=self._fence, on_rejoin=self._rejoined, connections=self.connections,
        )
        await self._heartbeat.register()
        await self.publish_kinds()
        limited = await self._declarations.limited_queues()
        ctx = self._context()
        self._elector = Elector(
            store=self._store, identity=self._identity, ttl=float(cfg.leader_ttl),
            events=self.events, services=maintenance.leader_services(ctx),
            may_lead=self._may_claim,
        )
        self._releaser = self._notifier.releaser = Releaser(
            store=self._store, events=self.events, release_interval=float(cfg.release_interval),
            poll_interval=float(cfg.poll_interval), notified=self._notifier.notified,
            on_released=self._notifier.wake,
        )
        for queue, concurrency in self.queues.items():
            self._pools[queue] = self._pool_of(cfg, queue, concurrency, queue in limited, ctx)
        self._governor = self._notifier.governor = self._governor_of(cfg)
        await self._governor.first_pass()
        self.events.start()
        await self._completer.start()
        await self._heartbeat.start()
        await self._notifier.start()
        self._services = [self._releaser, *maintenance.server_services(ctx), self._elector,
                          self._reconciler_of(cfg), self._governor]
        for service in self._services:
            await service.start()
        for pool in self._pools.values():
            await pool.start()
        # not among the services: it stops once running jobs had their shutdown_timeout
        self._canceller = self._notifier.canceller = Canceller(
            store=self._store, events=self.events, executor=executor,
            pools=lambda: self._pools.values(), interval=float(cfg.heartbeat_interval),
        )
        await self._canceller.start()
        self._state = ServerState.RUNNING
        log.info("server %s running queues %s", self.id, self.queues)

    def _executor_of(self, cfg: ServerConfig, threads: ThreadPool) -> Executor:
        handles = HandleStore(
            store=self._store, identity=self._identity, pools=self._pools,
            confirmed=lambda: self._heartbeat is None or self._heartbeat.confirmed,
        )
        return Executor(
            kinds=self.kinds, config=cfg, events=self.events, threads=threads,
            identity=self._identity, write_param=handles.write_param,
            middleware=self._middleware, cancel_age=handles.cancel_age,
            read_results=self._store.job_dependency_results,
        )

    def _pool_of(self, cfg: ServerConfig, queue: str, concurrency: int, limited: bool,
                 ctx: ServerContext) -> Pool:
        assert self._completer is not None
        return Pool(
            queue=queue, concurrency=concurrency, kinds=sorted(self.kinds), store=self._store,
            executor=self._executor, completer=self._completer, events=self.events,
            identity=self._identity, poll_interval=float(cfg.poll_interval),
            may_claim=self._may_claim, limited=limited,
            keys=self._declarations.limits_on_kinds,
            misfiled=functools.partial(misfiled_key, ctx),
        )

    def _governor_of(self, cfg: ServerConfig) -> Governor:
        """Every poll_interval without notifications; with them on each controls
        notification, and every max(poll_interval, dead_after/4) as a safety net."""
        return Governor(
            store=self._store, events=self.events, pools=lambda: self._pools,
            configured=self.queues, identity=self._identity,
            interval=float(cfg.poll_interval),
            notified_interval=max(float(cfg.poll_interval), float(cfg.dead_after) / 4),
            notified=self._notifier.notified, on_resized=self._grow_threads,
        )

    def _grow_threads(self) -> None:
        """A raised concurrency needs as many threads for plain def handlers."""
        if not self.config.sync_threads and self._threads is not None:
            self._threads.grow(sum(p.concurrency for p in self._pools.values()))

    def _reconciler_of(self, cfg: ServerConfig) -> Reconciler:
        """Every max(heartbeat_interval, dead_after/4), looking at claims at least as old:
        well inside dead_after, and one cheap query per interval."""
        assert self._completer is not None
        every = max(float(cfg.heartbeat_interval), float(cfg.dead_after) / 4)
        return Reconciler(
            store=self._store, events=self.events, completer=self._completer,
            pools=lambda: self._pools.values(), identity=self._identity,
            may_run=lambda: self._state is ServerState.RUNNING and self._may_claim(),
            interval=every, margin=every,
        )

    async def publish_kinds(self) -> None:
        """Publish the declarations of this server's kinds, so that producers without
        the handlers (the CLI, a bare Client) enqueue with them (docs/guide.md)."""
        await self._declarations.publish_kinds()

    def _context(self) -> ServerContext:
        """What the maintenance services share (kiln._server._context)."""
        return ServerContext(
            store=self._store, config=self.config, events=self.events, kinds=self.kinds,
            identity=self._identity,
            leader_since=lambda: self._elector.leader_since if self._elector else None,
            wake=self._notifier.wake, recurring=self.recurring,
            rekey=self._declarations.rekey,
        )

    async def _shutdown(self) -> None:
        self._state = ServerState.STOPPING
        log.info("server %s shutting down", self.id)
        if self._stopper is not None:  # else nothing was built that could run a job
            await self._stopper.shutdown(
                services=self._services, canceller=self._canceller, heartbeat=self._heartbeat
            )
        self._state = ServerState.STOPPED

    async def _close(self) -> None:
        await self._declarations.stop()
        await self._notifier.stop()
        await self.events.stop()
        if self._threads is not None:
            self._threads.shutdown()
        await self._store.close()
        self._state = ServerState.STOPPED

    # wiring ------------------------------------------------------------------------
    def _may_claim(self) -> bool:
        return self._state.before_shutdown and (
            self._heartbeat is None or self._heartbeat.confirmed
        )

    async def _fence(self, reason: str) -> None:
        """The heartbeat could not be confirmed: ``_may_claim`` stops the claims, and
        the running jobs end (kiln._server._stopper)."""
        assert self._stopper is not None  # built before the heartbeat that calls this
        await self._stopper.fence(reason)

    def _rejoined(self, new_id: str) -> None:
        """Registered again under ``new_id``; every part sees it through the identity."""
        for pool in self._pools.values():
            pool.wake()
        if self._state.before_shutdown:  # stopping: the declarations go with the registration
            self._declarations.publish_again()
