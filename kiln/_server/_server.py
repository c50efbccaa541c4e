"""Server: assembles pools, the completer, heartbeat, elector and services, and runs
them until shutdown. It implements none of them.

Shutdown (SIGTERM, SIGINT, ``stop()`` or cancelling ``run()``): stop claiming; wait up
to shutdown_timeout for running jobs; cancel the rest (they are handed back without
using an attempt); wait kill_grace; hand back whatever still ignores cancellation;
flush results; deregister; return. A second signal skips the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from kiln import _validate
from kiln._bus import Bus
from kiln._client import Client
from kiln._concurrency import Concurrency, check_queue_limit, limited_queues, queue_group
from kiln._config import ServerConfig
from kiln._cron import Recurring
from kiln._errors import ConfigError, KilnError, Shutdown
from kiln._events import EventHub, JobFinished, JobsReleased, NotifierChanged
from kiln._job import AttemptError, JobResult, JobRow, Outcome, ServerInfo
from kiln._kinds import Kind
from kiln._server._canceller import Canceller
from kiln._server._completer import Completer
from kiln._server._context import ServerContext
from kiln._server._elector import Elector
from kiln._server._executor import Executor, Middleware
from kiln._server._governor import Governor
from kiln._server._health import Counters, Health, stuck_reasons
from kiln._server._heartbeat import Heartbeater
from kiln._server._identity import Identity, new_server_id
from kiln._server._pool import Pool
from kiln._server._reconciler import Reconciler
from kiln._server._releaser import Releaser
from kiln._server._service import Service
from kiln._server._stats import QueueStats, ServerStats
from kiln._server._threads import ThreadPool
from kiln._tasks import stop_task
from kiln._version import VERSION
from kiln._wakeup import STATE, WakeupKind, parse
from kiln.stores import Store

log = logging.getLogger("kiln.server")
T = TypeVar("T")
# beyond kill_grace, the time a task whose wait for its thread just ended needs to
# send its result: without it the server could hand the same job back a second time
_SETTLE = 0.1


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
    ) -> None:
        self.config = config or ServerConfig()
        # a queue's global limit (kiln.Concurrency), declared in the store at start
        self.queue_limits = {q: check_queue_limit(q, c) for q, c in (queue_limits or {}).items()}
        if not queues:
            raise ConfigError("queues", dict(queues), "a server needs at least one queue")
        for name, concurrency in queues.items():
            _validate.check_name("queue", name)
            if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
                raise ConfigError(f"queues[{name!r}]", concurrency, "concurrency must be >= 1")
        if not kinds:
            raise ConfigError("kinds", [], "a server needs at least one job kind with a handler")
        self._store = store
        self._client: Client | None = None
        self.kinds = dict(kinds)
        self.queues = dict(queues)
        self.bus = bus
        self.events = events or EventHub()
        self.counters = Counters()
        self.events.subscribe(self.counters)
        self._middleware: list[Middleware] = list(middleware)
        self.recurring = list(recurring)
        host = socket.gethostname()
        # this server's registration, held by every part; a rejoin changes it there
        self._identity = Identity(ServerInfo(
            id=new_server_id(host), host=host, pid=os.getpid(), queues=self.queues,
            kinds=sorted(self.kinds), version=VERSION, started_at=datetime.now(UTC),
        ))
        self._stopping: asyncio.Event | None = None
        self._force = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = "new"  # new -> running -> stopping -> stopped
        self._pools: dict[str, Pool] = {}
        self._services: list[Service] = []
        self._threads: ThreadPool | None = None
        self._completer: Completer | None = None
        self._heartbeat: Heartbeater | None = None
        self._elector: Elector | None = None
        self._releaser: Releaser | None = None
        self._canceller: Canceller | None = None
        self._governor: Governor | None = None
        self._fencing: asyncio.Task[None] | None = None
        self._republish: asyncio.Task[None] | None = None

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
        if self._state != "new":
            raise RuntimeError("add middleware before the server runs")
        self._middleware.append(middleware)

    def stop(self, force: bool = False) -> None:
        """Ask for a graceful shutdown (thread-safe); ``force`` skips the waiting."""
        self._force = self._force or force
        loop, stopping = self._loop, self._stopping
        if stopping is not None and loop is not None:
            loop.call_soon_threadsafe(stopping.set)

    @property
    def state(self) -> str:
        """``new``, ``running``, ``stopping`` or ``stopped`` (as in ``stats().state``,
        without building the rest of the snapshot)."""
        return self._state

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
        reasons: list[str] = []
        fenced = bool(self._heartbeat and self._heartbeat.fenced)
        stale = bool(self._heartbeat and self._heartbeat.age > 2 * self.config.heartbeat_interval)
        piling = bool(self._completer and self._completer.over_limit)
        if self._state != "running":
            reasons.append(f"server is {self._state}")
        if fenced:
            reasons.append(f"fenced: {self._heartbeat.fenced if self._heartbeat else ''}")
        if stale and self._heartbeat:
            reasons.append(f"heartbeat stale: last confirmed {self._heartbeat.age:.1f}s ago")
        if piling and self._completer:
            reasons.append(f"results piling up: {self._completer.pending} unwritten")
        stuck = self._stuck_reasons()
        reasons.extend(stuck)
        unwritten = self._completer.health_problems() if self._completer else []
        reasons.extend(unwritten)
        return Health(
            ok=not reasons, reasons=tuple(reasons), fenced=fenced, heartbeat_stale=stale,
            results_piling_up=piling, handlers_stuck=bool(stuck),
            results_stuck=bool(unwritten),
        )

    def _stuck_reasons(self) -> list[str]:
        if self._state != "running" or self._threads is None:
            return []
        slots = {q: (p.concurrency, len(p.lingering)) for q, p in self._pools.items()}
        return stuck_reasons(slots, self._executor.sync.stuck, self._threads.size)

    def stats(self) -> ServerStats:
        """A snapshot of this server, from memory: it never queries the database."""
        hb, c = self._heartbeat, self._completer
        queues = self._queue_stats()
        return ServerStats(
            server_id=self.id,
            state=self._state,
            leader=self.is_leader,
            running=sum(q.running for q in queues.values()),
            concurrency=sum(q.concurrency for q in queues.values()),
            queues=queues,
            **self.counters.as_dict(),  # one keyword per counter, each a field
            results_pending=c.pending if c else 0,
            results_poisoned=c.poisoned if c else 0,
            results_dropped=c.dropped if c else 0,
            results_unapplied=c.unapplied if c else 0,
            results_failing_for=c.failing_for if c else 0.0,
            completer_crashes=c.crashes if c else 0,
            heartbeat_age=hb.age if hb else None,
            fenced_reason=hb.fenced if hb else None,
            notifications=self._notified(),
            event_errors=self.events.errors,
            events_dropped=self.events.dropped,
            handlers_stuck=sum(q.stuck for q in queues.values()),
            threads_stuck=self._executor.sync.stuck if self._threads is not None else 0,
            rate_keys_undeclared=self._rate_keys_undeclared(),
        )

    def _queue_stats(self) -> dict[str, QueueStats]:
        pools = dict(self._pools)  # empty until the server starts
        if not pools:
            return {q: QueueStats(concurrency=c) for q, c in self.queues.items()}
        out = {}
        for queue, pool in pools.items():
            started = [r.attempted_at for r in list(pool.running.values()) if r.attempted_at]
            out[queue] = QueueStats(
                concurrency=pool.concurrency, running=len(pool.running),
                stuck=len(pool.lingering), paused=pool.paused,
                oldest_started=min(started) if started else None,
            )
        return out

    def _rate_keys_undeclared(self) -> int:
        """Keys with pending jobs and no declared rate limit, as this server's admitter
        last saw them: their jobs wait until someone declares the key."""
        from kiln.maintenance.admitter import Admitter

        return sum(len(s.undeclared) for s in self._services if isinstance(s, Admitter))

    def run_sync(self) -> None:
        """Run until SIGTERM/SIGINT in a fresh event loop (scripts, the CLI)."""
        run_in_new_loop(self.run())

    # running -----------------------------------------------------------------------
    async def run(self) -> None:
        if self._state != "new":
            raise RuntimeError(f"a server runs once; this one is {self._state}")
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        cancelled = False
        # signals first: a SIGTERM that arrives while the server starts (after its pools
        # may have claimed jobs) must shut it down gracefully, not kill the process
        self._install_signals()
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
                await self._stopping.wait()
            except asyncio.CancelledError:
                cancelled = True
            await self._shutdown()
        finally:
            self._remove_signals()
            await self._close()
        if cancelled:
            raise asyncio.CancelledError

    async def _start(self) -> None:
        cfg = self.config
        self._threads = ThreadPool(cfg.sync_threads or sum(self.queues.values()))
        self._completer = Completer(
            self._store, cfg, self.events, self._wake, on_scheduled=self._arm_releaser,
            on_applied=self._wake_limited,
        )
        executor = Executor(
            self.kinds, cfg, self.events, self._threads, self._identity, self._write_param,
            self._middleware, self._cancel_age, self._store.job_dependency_results,
        )
        self._executor = executor
        self._heartbeat = Heartbeater(
            self._store, self._identity, cfg, self.events, self._fence, self._rejoined
        )
        await self._heartbeat.register()
        await self.publish_kinds()
        limited = await self._limited_queues()
        ctx = self.context()
        from kiln import maintenance

        self._elector = Elector(
            self._store, self._identity, float(cfg.leader_ttl), self.events,
            maintenance.leader_services(ctx), self._may_claim,
        )
        self._releaser = Releaser(
            self._store, self.events, float(cfg.release_interval), float(cfg.poll_interval),
            self._notified, self._wake,
        )
        keys = self._limits_on_kinds()
        for queue, concurrency in self.queues.items():
            self._pools[queue] = Pool(
                queue, concurrency, sorted(self.kinds), self._store, executor, self._completer,
                self.events, self._identity, float(cfg.poll_interval), self._may_claim,
                limited=queue in limited, keys=keys,
            )
        self._governor = self._governor_of(cfg)
        await self._first_controls(self._governor)
        self.events.start()
        await self._completer.start()
        await self._heartbeat.start()
        await self._start_notifications()
        self._services = [self._releaser, *maintenance.server_services(ctx), self._elector,
                          self._reconciler_of(cfg), self._governor]
        for service in self._services:
            await service.start()
        for pool in self._pools.values():
            await pool.start()
        # not among the services: it stops once running jobs had their shutdown_timeout
        self._canceller = Canceller(self._store, self.events, executor,
                                    lambda: self._pools.values(), float(cfg.heartbeat_interval))
        await self._canceller.start()
        self._state = "running"
        log.info("server %s running queues %s", self.id, self.queues)

    def _governor_of(self, cfg: ServerConfig) -> Governor:
        return Governor(
            self._store, self.events, lambda: self._pools, self.queues, self._identity,
            (float(cfg.poll_interval),
             max(float(cfg.poll_interval), float(cfg.dead_after) / 4)), self._notified,
            self._grow_threads,
        )

    async def _first_controls(self, governor: Governor) -> None:
        """Obey the queue controls before the first claim (a pause holds in the claim
        anyway; a lowered concurrency would not)."""
        try:
            await governor.run_once()
        except (KilnError, OSError) as exc:
            log.warning("server %s could not read the queue controls (%s); its governor"
                        " tries again in poll_interval", self.id, exc)

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
            self._store, self.events, self._completer, lambda: self._pools.values(),
            self._identity, lambda: self._state == "running" and self._may_claim(),
            interval=every, margin=every,
        )

    async def publish_kinds(self) -> None:
        """Publish the declarations of this server's kinds, so that producers without
        the handlers (the CLI, a bare Client) enqueue with them (docs/guide.md)."""
        await self._store.kinds_publish(
            self.id, self.info.host, self.info.pid,
            [kind.declaration() for kind in self.kinds.values()],
        )

    async def _limited_queues(self) -> set[str]:
        """Declare this server's queue limits; the queues whose claims must count."""
        declared = {queue_group(q): c.max for q, c in self.queue_limits.items()}
        if declared:
            await self._store.concurrency_declare(declared)
        found = set(await self._store.concurrency_in_use())  # limits other servers declared
        return limited_queues(self.queues, self._limits_on_kinds(), set(declared) | found)

    def _limits_on_kinds(self) -> bool:
        """Whether one of this server's kinds has a limit of its own: then its pools'
        claims lock and count keys, else only their queue's limit (Store.job_claim)."""
        return any(k.concurrency for k in self.kinds.values())

    def context(self) -> ServerContext:
        return ServerContext(
            store=self._store, config=self.config, events=self.events, kinds=self.kinds,
            identity=self._identity,
            leader_since=lambda: self._elector.leader_since if self._elector else None,
            wake=self._wake, recurring=self.recurring,
        )

    async def _shutdown(self) -> None:
        self._state = "stopping"
        log.info("server %s shutting down", self.id)
        # every pool at once: each may wait up to its claim_timeout for a claim in flight
        await asyncio.gather(*(pool.stop_claiming() for pool in self._pools.values()))
        for service in reversed(self._services):
            await service.stop()
        tasks = [t for p in self._pools.values() for t in p.running]
        if tasks and not self._force:
            await self._wait_tasks(tasks, float(self.config.shutdown_timeout), interruptible=True)
        if self._canceller is not None:
            await self._canceller.stop()
        self._executor.shutting_down = True
        tasks = [t for p in self._pools.values() for t in p.running]
        if tasks:
            self._grant_grace()
            for pool in self._pools.values():
                pool.cancel_running()
            await self._wait_tasks(tasks, float(self.config.kill_grace) + _SETTLE)
        for pool in self._pools.values():
            for row in pool.abandon():
                self._hand_back(row)
        if self._completer is not None:
            await self._completer.stop(timeout=float(self.config.kill_grace) + 5.0)
        if self._heartbeat is not None:
            await self._heartbeat.stop()
            with contextlib.suppress(KilnError, OSError, TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._store.server_deregister(self.id)
        self._state = "stopped"

    async def _wait_tasks(
        self, tasks: list[asyncio.Task[None]], timeout: float, interruptible: bool = False
    ) -> None:
        """Wait for ``tasks`` up to ``timeout``; a forced stop interrupts the graceful wait."""
        deadline = time.monotonic() + timeout
        pending = {t for t in tasks if not t.done()}
        while pending and not (interruptible and self._force):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            _done, pending = await asyncio.wait(pending, timeout=min(left, 0.05))

    def _hand_back(self, row: JobRow) -> None:
        """Hand back a job whose task ignored cancellation; it counts as any hand-back,
        and its record says that its handler may still be running."""
        assert self._completer is not None
        error = Shutdown("its handler ignored the cancellation past kill_grace, and may "
                         "have gone on running after this record")
        self.events.emit(
            JobFinished(job=row, outcome=Outcome.HANDED_BACK, duration=0.0, error=error)
        )
        record = AttemptError(attempt=row.attempt, at=time.time(),
                              error=f"Shutdown: {error}", server_id=self.id)
        self._completer.push(
            JobResult(job_id=row.id, server_id=row.server_id or self.id, attempt=row.attempt,
                      outcome=Outcome.HANDED_BACK, error=record)
        )

    async def _close(self) -> None:
        # waited for (bounded), not just cancelled: one still running after the store
        # closed would open it again, and nothing would close that
        for task in (self._fencing, self._republish):
            with contextlib.suppress(Exception):
                await stop_task(task)
        if self.bus is not None:
            with contextlib.suppress(Exception):
                await self.bus.unsubscribe(self._on_notification)
        await self.events.stop()
        if self._threads is not None:
            self._threads.shutdown()
        await self._store.close()
        self._state = "stopped"

    # wiring ------------------------------------------------------------------------
    def _may_claim(self) -> bool:
        return self._state in ("new", "running") and (
            self._heartbeat is None or self._heartbeat.confirmed
        )

    def _notified(self) -> bool:
        if self._store.capabilities.listen_notify:
            return self._store.listening()
        return self.bus is not None and self.bus.connected()

    def _wake(self, released: dict[str, int], reason: str) -> None:
        """Jobs became available (``reason`` as in ``JobsReleased``): wake this server's
        pools, say so once per queue, and wake the fleet through the bus."""
        for queue, count in released.items():
            pool = self._pools.get(queue)
            if pool is not None:
                pool.wake()
            if self.events.active:
                self.events.emit(JobsReleased(queue=queue, count=count, reason=reason))
        if self.bus is not None and not self._store.capabilities.listen_notify:
            for queue in released:
                task = asyncio.ensure_future(self.bus.publish(queue))
                task.add_done_callback(lambda t: t.exception())

    def _wake_limited(self) -> None:
        """Results were written: a limited pool may find a key's slot free now."""
        for pool in self._pools.values():
            if pool.limited:
                pool.wake()

    def _arm_releaser(self, delay: float) -> None:
        if self._releaser is not None:
            self._releaser.arm(delay)

    def _on_notification(self, channel: str, payload: str) -> None:
        if channel == STATE:
            self._notifier_changed(payload == "up")
            return
        wakeup = parse(payload)
        if wakeup.kind is WakeupKind.CANCEL and self._canceller is not None:
            self._canceller.poke()
        elif wakeup.kind is WakeupKind.CONTROLS and self._governor is not None:
            self._governor.wake()
        elif wakeup.kind is WakeupKind.SCHEDULED and self._releaser is not None:
            self._releaser.arm(wakeup.at - time.time())
        pool = self._pools.get(payload)  # a queue may be named like any payload
        if pool is not None:
            pool.notified()

    def _notifier_changed(self, up: bool) -> None:
        """Down: the releaser falls back to its 100 ms check now, not after its sleep.
        Up: wake-ups sent meanwhile may be lost, so every pool and the releaser look."""
        source = "listen" if self._store.capabilities.listen_notify else getattr(
            self.bus, "name", "bus"
        )
        self.events.emit(NotifierChanged(up=up, source=source))
        if self._releaser is not None:
            self._releaser.wake()
        if up and self._governor is not None:
            self._governor.wake()  # a controls notification may have been lost
        if up:
            for pool in self._pools.values():
                pool.wake()
            if self._canceller is not None:  # a cancel may have been missed meanwhile
                self._canceller.poke()

    async def _start_notifications(self) -> None:
        if self._store.capabilities.listen_notify:
            await self._store.listen(self._on_notification)
            self.events.emit(NotifierChanged(up=self._store.listening(), source="listen"))
        elif self.bus is not None:
            await self.bus.subscribe(self._on_notification)
            self.events.emit(NotifierChanged(up=self.bus.connected(), source=self.bus.name))

    async def _write_param(self, row: JobRow, name: str, value: Any) -> bool:
        pool = self._pools.get(row.queue)
        if pool is not None:
            await pool.settled(row.id)  # a claim on a notification may not have committed
        if self._heartbeat is not None and not self._heartbeat.confirmed:
            # stalled past the fence (a paused process, a blocked loop): to the others
            # this server may be dead, so it writes nothing before the fence lands
            return False
        return await self._store.job_param_set(
            row.id, row.server_id or self.id, row.attempt, name, value
        )

    async def _cancel_age(self, row: JobRow) -> float | None:
        """Seconds since this attempt's job was cancelled; None when it was not."""
        for request in await self._store.jobs_cancel_requested([row.id]):
            if request.attempt == row.attempt and request.server_id == row.server_id:
                return request.age
        return None

    async def _fence(self, reason: str) -> None:
        """Stop claiming (``_may_claim`` sees the fence), cancel running jobs, wait kill_grace.

        The cancelled jobs write no result: the rescuer of a healthy server retries them.
        """
        tasks = [t for p in self._pools.values() for t in p.running]
        self._grant_grace()
        for task in tasks:
            task.cancel(msg=f"kiln: fenced ({reason})")
        if tasks:
            await self._wait_tasks(tasks, float(self.config.kill_grace) + _SETTLE)
        for pool in self._pools.values():
            pool.abandon()  # what still runs lingers, keeping its slot (see _lingering)
        self._executor.sync.grace_until = None

    def _grant_grace(self) -> None:
        """The end of the kill_grace the server waits: threads are waited for until then."""
        assert self._loop is not None
        self._executor.sync.grace_until = self._loop.time() + float(self.config.kill_grace)

    def _rejoined(self, new_id: str) -> None:
        """Registered again under ``new_id``; every part sees it through the identity."""
        for pool in self._pools.values():
            pool.wake()
        if self._state not in ("new", "running"):
            return  # stopping: the declarations go with the registration
        if self._republish is not None:  # an earlier rejoin's: this one supersedes it
            self._republish.cancel()
        # declarations published under the old id no longer count as a live server's
        self._republish = asyncio.get_running_loop().create_task(
            self._publish_again(), name="kiln-kinds-publish"
        )

    async def _publish_again(self) -> None:
        try:
            await self.publish_kinds()
        except (KilnError, OSError) as exc:  # producers keep the declaration they have
            log.warning("server %s could not publish its kinds again: %s", self.id, exc)

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().add_signal_handler(sig, self._on_signal, sig)

    def _remove_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                asyncio.get_running_loop().remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._state == "stopping" or (self._stopping and self._stopping.is_set()):
            log.warning("second %s: forcing a fast shutdown (jobs are still handed back)",
                        sig.name)
            self._force = True
        else:
            log.info("%s received: shutting down gracefully", sig.name)
        if self._stopping is not None:
            self._stopping.set()


def run_in_new_loop(main: Coroutine[Any, Any, T]) -> T:
    """Like ``asyncio.run``, but does not wait for tasks that ignore cancellation.

    ``asyncio.run`` cancels leftover tasks and waits for them: a job that swallows
    CancelledError would hold the process long after the server handed it back.
    """
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(main)
    finally:
        leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in leftovers:
            task.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.wait(leftovers, timeout=0.1))
        for task in leftovers:  # abandoned on purpose: silence "destroyed but pending"
            task._log_destroy_pending = False  # type: ignore[attr-defined]
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
