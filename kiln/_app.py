"""App: the user's entry point. Declares job kinds, recurring jobs and middleware,
and hands out clients and servers bound to one database URL.

It assembles; it does not implement. Sync calls (``enqueue``, ``migrate``) work from
any thread; async ones (``aenqueue``) from any event loop, each loop with its own store.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from kiln._batch import build_all
from kiln._bus import Bus
from kiln._catalog import KindCatalog
from kiln._client import Client, EnqueueHook
from kiln._concurrency import Concurrency, check_queue_limit
from kiln._config import ServerConfig
from kiln._cron import Recurring
from kiln._errors import ConfigError
from kiln._events import EventHub
from kiln._job import EnqueueResult
from kiln._kinds import Handler, Kind, make_kind
from kiln._options import EnqueueOptions, JobOptions
from kiln._portal import Portal
from kiln._server import Middleware, Server
from kiln.stores import Store, StoreOptions, store_from_url

F = TypeVar("F", bound=Handler)
DEFAULT_URL = "sqlite:///kiln.db"


def database_url(url: str | None = None) -> str:
    return url or os.environ.get("KILN_DATABASE_URL") or DEFAULT_URL


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
        self._store_options = store_options
        self._sync_store = store_from_url(self.url, **store_options)  # validates the URL now
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
    def job(self, kind: str, **options: Unpack[JobOptions]) -> Callable[[F], F]:
        """Register the decorated function as the handler of ``kind``."""

        def register(fn: F) -> F:
            self.register(kind, fn, **options)
            return fn

        return register

    def register(self, kind: str, handler: Handler, **options: Unpack[JobOptions]) -> Kind:
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
        return Client(self._sync_store, self.kinds, bus=self.bus, events=self.events,
                      hooks=self.enqueue_hooks, known_only=self.known_kinds_only,
                      catalog=self._sync_catalog)

    def enqueue(
        self, kind: str, args: Any = None, *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        """Insert one job from sync code; with ``conn`` it joins that transaction. The
        result is the job's id (an int); ``.inserted`` is False for a unique duplicate."""
        return self.sync_client().enqueue_sync(kind, args, conn=conn, **options)

    def enqueue_many(
        self, jobs: Sequence[tuple[str, Any] | tuple[str, Any, dict[str, Any]]], *, conn: Any = None
    ) -> list[EnqueueResult]:
        client = self.sync_client()
        client.catalog.ensure_sync(item[0] for item in jobs)
        return client.insert_many_sync(build_all(client, jobs), conn)

    async def aenqueue(
        self, kind: str, args: Any = None, *, conn: Any = None, **options: Unpack[EnqueueOptions]
    ) -> EnqueueResult:
        return await self.client().enqueue(kind, args, conn=conn, **options)

    async def aenqueue_many(
        self, jobs: Sequence[tuple[str, Any] | tuple[str, Any, dict[str, Any]]], *, conn: Any = None
    ) -> list[EnqueueResult]:
        client = self.client()
        await client.catalog.ensure(item[0] for item in jobs)
        return await client.insert_many(build_all(client, jobs), conn)

    # schema ------------------------------------------------------------------------
    def migrate(self) -> list[int]:
        """Create or upgrade kiln's tables; returns the versions applied."""
        return self._portal.run(self.amigrate())

    async def amigrate(self) -> list[int]:
        store = store_from_url(self.url, **self._store_options)
        await store.open()
        try:
            return await store.migrate()
        finally:
            await store.close()

    def new_store(self) -> Store:
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
            queue_limits=self.queue_limits,
        )
