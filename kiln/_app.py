"""App: the user's entry point. Declares job kinds, recurring jobs and middleware,
and hands out clients and servers bound to one database URL.

It assembles; it does not implement. Sync calls (``enqueue``, ``migrate``) work from
any thread; async ones (``aenqueue``) from any event loop, each loop with its own store.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar, Unpack

from kiln._aio._portal import Portal
from kiln._client._bus import Bus
from kiln._client._catalog import KindCatalog
from kiln._client._client import Client, EnqueueHook, ManyItem, Step
from kiln._errors import ConfigError
from kiln._events import EventHub
from kiln._model._concurrency import Concurrency, check_queue_limit
from kiln._model._job import EnqueueResult
from kiln._model._kindref import KindRef
from kiln._model._kinds import Handler, Kind, make_kind
from kiln._model._options import EnqueueOptions, JobOptions
from kiln._model._recurring import Recurring
from kiln._server import Job, Middleware, Server, ServerConfig
from kiln.stores import Store, StoreOptions, store_from_url, with_bus

ArgsT = TypeVar("ArgsT")
ResultT = TypeVar("ResultT")
DEFAULT_URL = "sqlite:///kiln.db"


def database_url(url: str | None = None) -> str:
    return url or os.environ.get("KILN_DATABASE_URL") or DEFAULT_URL


class JobHandle(KindRef[ArgsT], Generic[ArgsT, ResultT]):
    """What ``@app.job(kind)`` returns: the handler, still callable as the plain
    function, and the kind's typed enqueue. ``send_email.enqueue({"to": ...})`` is
    ``app.enqueue("email.send", {"to": ...})`` with the args checked by a type checker
    against what the handler declares (``job: kiln.Job[EmailArgs]``): a TypedDict's
    fields, a dataclass or a Pydantic model (an instance, encoded to JSON here).
    """

    __name__: str  # the function's, and its __doc__, __module__ (functools.update_wrapper)
    __wrapped__: Callable[..., Any]
    app: App
    kind: str
    fn: Callable[[Job[ArgsT]], ResultT]  # what the server runs (the kind's handler)

    def __init__(self, app: App, kind: str, fn: Callable[[Job[ArgsT]], ResultT]) -> None:
        if isinstance(fn, JobHandle):  # a handle of another kind (stacked decorators)
            fn = fn.fn
        functools.update_wrapper(self, fn)  # first: the function's __dict__ is copied
        KindRef.__init__(self, kind)  # no args_type: the app's declaration checks the args
        self.app = app
        self.fn = fn

    def __call__(self, job: Job[ArgsT]) -> ResultT:
        return self.fn(job)

    def __repr__(self) -> str:
        return f"<JobHandle {self.kind!r} {getattr(self.fn, '__qualname__', self.fn)}>"

    def enqueue(
        self, args: ArgsT, *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        """Insert one job of this kind from sync code (``App.enqueue``)."""
        return self.app.enqueue(self.kind, args, conn=conn, **options)

    async def aenqueue(
        self, args: ArgsT, *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        """Insert one job of this kind from async code (``App.aenqueue``)."""
        return await self.app.aenqueue(self.kind, args, conn=conn, **options)

    def enqueue_many(
        self, many: Sequence[ArgsT], *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> list[EnqueueResult]:
        """Insert one job of this kind per args, all in one transaction, each with
        ``options`` (``App.enqueue_many``)."""
        return self.app.enqueue_many([(self.kind, a, dict(options)) for a in many], conn=conn)

    async def aenqueue_many(
        self, many: Sequence[ArgsT], *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> list[EnqueueResult]:
        """``enqueue_many`` from async code (``App.aenqueue_many``)."""
        return await self.app.aenqueue_many([(self.kind, a, dict(options)) for a in many],
                                            conn=conn)


class JobKind(KindRef[ArgsT]):
    """A kind declared where its handler is not (a service that only enqueues, holding
    a ``kiln.Client``): ``send_email = kiln.kind("email.send", EmailArgs)``, then
    ``await send_email.aenqueue(client, {"to": ...})``, its args checked by a type
    checker as a ``JobHandle``'s are, and a mapping given for a dataclass or Pydantic
    ``args_type`` checked at enqueue. ``to`` is a ``Client`` or an ``App``. Where a
    kind's name goes (``enqueue``, chains, fan-ins), a ``JobKind`` goes too."""

    args_type: type[ArgsT]

    def __init__(self, kind: str, args_type: type[ArgsT]) -> None:
        super().__init__(kind, args_type)

    def enqueue(
        self, to: App | Client, args: ArgsT, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Insert one job of this kind from sync code (``App.enqueue``,
        ``Client.enqueue_sync``)."""
        if isinstance(to, App):
            return to.enqueue(self, args, conn=conn, **options)
        return to.enqueue_sync(self, args, conn=conn, **options)

    async def aenqueue(
        self, to: App | Client, args: ArgsT, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Insert one job of this kind from async code (``App.aenqueue``,
        ``Client.enqueue``)."""
        if isinstance(to, App):
            return await to.aenqueue(self, args, conn=conn, **options)
        return await to.enqueue(self, args, conn=conn, **options)

    def enqueue_many(
        self, to: App | Client, many: Sequence[ArgsT], *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """One job of this kind per args, in one transaction, each with ``options``."""
        items: list[ManyItem] = [(self, a, dict(options)) for a in many]
        if isinstance(to, App):
            return to.enqueue_many(items, conn=conn)
        return to.enqueue_many_sync(items, conn=conn)

    async def aenqueue_many(
        self, to: App | Client, many: Sequence[ArgsT], *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """``enqueue_many`` from async code."""
        items: list[ManyItem] = [(self, a, dict(options)) for a in many]
        if isinstance(to, App):
            return await to.aenqueue_many(items, conn=conn)
        return await to.enqueue_many(items, conn=conn)


def kind(name: str, args_type: type[ArgsT]) -> JobKind[ArgsT]:
    """Declare kind ``name`` with args of ``args_type`` for code that enqueues it but
    holds no handler of it: ``kiln.kind("email.send", EmailArgs)`` (see ``JobKind``)."""
    return JobKind(name, args_type)


class App:
    """The entry point: declares job kinds (``@app.job``), recurring jobs, queue limits
    and middleware, and hands out clients and servers bound to one database URL.

    ``kiln.App("postgresql://...")`` or ``kiln.App()`` (``KILN_DATABASE_URL``, else the
    embedded SQLite file). ``app.enqueue`` / ``await app.aenqueue`` insert jobs;
    ``app.client()`` is the running loop's ``Client``; ``app.server(queues)`` builds a
    ``Server`` that runs the declared handlers; ``app.migrate()`` creates the schema.
    """

    def __init__(
        self,
        database_url_: str | None = None,
        *,
        bus: Bus | None = None,
        known_kinds_only: bool = True,
        **store_options: Unpack[StoreOptions],
    ) -> None:
        self.url = database_url(database_url_)
        # with a Bus, the Bus carries the wake-ups: a PostgreSQL store sends no NOTIFY
        self._store_options = (with_bus(self.url, store_options) if bus is not None
                               else store_options)
        self._sync_store = store_from_url(self.url, **self._store_options)  # validates the URL now
        self.kinds: dict[str, Kind] = {}
        self._sync_catalog = KindCatalog(self._sync_store, self.kinds)  # outlives sync clients
        self.bus = bus
        self.known_kinds_only = known_kinds_only
        self.recurring: list[Recurring] = []
        self.queue_limits: dict[str, Concurrency] = {}
        self.middleware: list[Middleware] = []
        self.events = EventHub()  # client-side events (enqueued)
        self.enqueue_hooks: list[EnqueueHook] = []
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Client] = (
            weakref.WeakKeyDictionary()
        )
        self._portal = Portal()
        self._lock = threading.Lock()

    # declarations ------------------------------------------------------------------
    def job(
        self, kind: str, **options: Unpack[JobOptions]
    ) -> Callable[[Callable[[Job[ArgsT]], ResultT]], JobHandle[ArgsT, ResultT]]:
        """Register the decorated function as the handler of ``kind``; it becomes a
        ``JobHandle``: still the function when called, with the kind's typed
        ``enqueue``/``aenqueue`` (args checked against ``job: kiln.Job[ArgsT]``)."""

        def register(fn: Callable[[Job[ArgsT]], ResultT]) -> JobHandle[ArgsT, ResultT]:
            self.register(kind, fn, **options)
            return JobHandle(self, kind, fn)

        return register

    def register(self, kind: str, handler: Handler, **options: Unpack[JobOptions]) -> Kind:
        """Register ``handler`` for ``kind`` (``@app.job`` without the handle)."""
        if isinstance(handler, JobHandle):  # another app's (or kind's) handle: its function
            handler = handler.fn
        if kind in self.kinds:
            raise ConfigError("kind", kind, "this kind already has a handler")
        spec = make_kind(kind, handler, **options)
        self.kinds[kind] = spec
        return spec

    def queue_concurrency(self, queue: str, limit: Concurrency) -> None:
        """Run at most ``limit.max`` jobs of ``queue`` at once across the whole fleet,
        whoever enqueued them. Declared in the database when a server of this app
        starts; every server claims the queue's jobs under that limit from then on."""
        self.queue_limits[queue] = check_queue_limit(queue, limit)

    def schedule(
        self, name: str, kind: str, args: Any = None, *, cron: str | None = None,
        every: float | None = None, timezone: str = "UTC", **options: Unpack[EnqueueOptions],
    ) -> Recurring:
        """Enqueue ``kind`` on every slot of a cron expression or interval."""
        if any(r.name == name for r in self.recurring):
            raise ConfigError("name", name, "a recurring job with this name exists")
        item = Recurring(name=name, kind=kind, args={} if args is None else args, cron=cron,
                         every=every, timezone=timezone, options=dict(options))
        self.recurring.append(item)
        return item

    def use(self, middleware: Middleware) -> Middleware:
        """Wrap every job execution of this app's servers."""
        self.middleware.append(middleware)
        return middleware

    # clients -----------------------------------------------------------------------
    def client(self) -> Client:
        """The async client of the running event loop (one store per loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            client = self._clients.get(loop)
            if client is None:
                client = Client(
                    store_from_url(self.url, **self._store_options), self.kinds,
                    bus=self.bus, events=self.events, hooks=self.enqueue_hooks,
                    known_only=self.known_kinds_only,
                )
                self._clients[loop] = client
        return client

    def sync_client(self) -> Client:
        """A client for sync code (its ``_sync`` methods), over the app's sync store."""
        return Client(self._sync_store, self.kinds, bus=self.bus, events=self.events,
                      hooks=self.enqueue_hooks, known_only=self.known_kinds_only,
                      catalog=self._sync_catalog)

    def enqueue(
        self, kind: str | KindRef[Any], args: Any = None, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """Insert one job from sync code; with ``conn`` it joins that transaction. The
        result is the job's id (an int); ``.inserted`` is False for a unique duplicate.
        ``kind`` is a name, or a ``JobHandle`` / ``kiln.kind(...)`` (args type-checked)."""
        return self.sync_client().enqueue_sync(kind, args, conn=conn, **options)

    async def aenqueue(
        self, kind: str | KindRef[Any], args: Any = None, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> EnqueueResult:
        """``enqueue`` from async code (the running loop's ``Client.enqueue``)."""
        return await self.client().enqueue(kind, args, conn=conn, **options)

    def enqueue_many(
        self, jobs: Sequence[ManyItem], *, conn: Any = None
    ) -> list[EnqueueResult]:
        """Insert ``(kind, args)`` or ``(kind, args, options)`` items (or ready-made
        ``NewJob``s) from sync code: all checked, then written in one transaction (or
        ``conn``'s); their ids, in order."""
        return self.sync_client().enqueue_many_sync(jobs, conn=conn)

    async def aenqueue_many(
        self, jobs: Sequence[ManyItem], *, conn: Any = None
    ) -> list[EnqueueResult]:
        """``enqueue_many`` from async code."""
        return await self.client().enqueue_many(jobs, conn=conn)

    def enqueue_chain(
        self, steps: Sequence[Step], *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """Jobs that run one after another (each after the one before), from sync code:
        all checked, then written in one transaction (or ``conn``'s). A step's kind may
        be a ``JobHandle``."""
        return self.sync_client().enqueue_chain_sync(steps, conn=conn, **options)

    async def aenqueue_chain(
        self, steps: Sequence[Step], *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[EnqueueResult]:
        """``enqueue_chain`` from async code."""
        return await self.client().enqueue_chain(steps, conn=conn, **options)

    def enqueue_fan_in(
        self, parts: Sequence[Step], then: Step, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> tuple[list[EnqueueResult], EnqueueResult]:
        """``parts`` and one job after all of them, from sync code: all checked, then
        written in one transaction (or ``conn``'s). A kind may be a ``JobHandle``."""
        return self.sync_client().enqueue_fan_in_sync(parts, then, conn=conn, **options)

    async def aenqueue_fan_in(
        self, parts: Sequence[Step], then: Step, *, conn: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> tuple[list[EnqueueResult], EnqueueResult]:
        """``enqueue_fan_in`` from async code."""
        return await self.client().enqueue_fan_in(parts, then, conn=conn, **options)

    # schema ------------------------------------------------------------------------
    def migrate(self) -> list[int]:
        """Create or upgrade kiln's tables; returns the versions applied."""
        return self._portal.run(self.amigrate())

    async def amigrate(self) -> list[int]:
        """``migrate`` from async code."""
        store = store_from_url(self.url, **self._store_options)
        await store.open()
        try:
            return await store.migrate()
        finally:
            await store.close()

    def new_store(self) -> Store:
        """A store of its own over the app's database (not opened yet)."""
        return store_from_url(self.url, **self._store_options)

    def close(self) -> None:
        """Close the connections sync calls opened (call once, when done with the app)."""
        self._portal.run(self._sync_store.close())
        self._portal.close()

    async def aclose(self) -> None:
        """Close the store of the running loop's client, if one was made."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.close()

    def client_connections(self) -> int:
        """The database connections this app's clients hold now (their stores', the sync
        one's): a server of the app reports them with its own."""
        with self._lock:
            clients = list(self._clients.values())
        return self._sync_store.connections() + sum(c.connections() for c in clients)

    def __enter__(self) -> App:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # servers -----------------------------------------------------------------------
    def server(
        self,
        queues: Mapping[str, int] | None = None,
        config: ServerConfig | None = None,
        *,
        events: EventHub | None = None,
    ) -> Server:
        """A server with its own store; default: every queue the kinds name, 10 each."""
        if queues is None:
            queues = {k.queue: 10 for k in self.kinds.values()} or {"default": 10}
        return Server(
            self.new_store(), self.kinds, queues, config, bus=self.bus,
            middleware=self.middleware, recurring=self.recurring, events=events,
            queue_limits=self.queue_limits, connections=self.client_connections,
        )
