"""The LISTEN connection: one dedicated connection that wakes servers on NOTIFY.

Owns that connection and its task (``kiln-pg-listener``): connect, LISTEN on the
``kiln`` channel, hand each notification to the callbacks, and reconnect with capped,
jittered backoff when the connection is lost. TCP keepalives detect a silent peer.
After its set-up it reads the connection from an event-loop reader callback with
libpq's own calls, so a notification reaches the callbacks without an asyncio task
hop, and it lends the connection to the Claimer, which claims on it for idle pools
as notifications arrive. It runs nothing else, so an idle listener costs the
database nothing. Like a Bus, it tells its subscribers on channel ``STATE`` when its
connection is lost (``down``) and when it is back (``up``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import pq

from kiln._aio._tasks import stop_task
from kiln._errors import StoreError
from kiln._model._wakeup import CHANNEL, STATE
from kiln.stores._protocol import NotifyCallback
from kiln.stores.postgres._claimer import Broken, Claimer
from kiln.stores.postgres._plan import Counter

log = logging.getLogger("kiln.stores.postgres")
PROBE_WAIT = 5.0  # seconds a new LISTEN connection waits for its probe notification



def application_name(url: str, default: str) -> str:
    """The URL's own ``application_name`` (an operator's name for the process, which
    pg_stat_activity then counts), else ``default``."""
    try:
        given = psycopg.conninfo.conninfo_to_dict(url).get("application_name")
    except psycopg.ProgrammingError:
        given = None
    return str(given) if given else default

class NotListening(Exception):
    """LISTEN succeeded but its probe notification never came: the connection is not a
    session (a transaction-mode pooler hands each transaction another server
    connection, and what it listened on is not the one notified)."""


class Listener:
    """``probe(channel)`` sends a NOTIFY on ``channel`` from another connection (the
    store's pool): each new LISTEN connection checks that it hears one before it
    counts as up."""

    def __init__(
        self, url: str, counter: Counter, *, connect_timeout: float = 5.0,
        max_backoff: float = 5.0, where: str = "PostgreSQL",
        probe: Callable[[str], Awaitable[None]] | None = None,
        probe_wait: float = PROBE_WAIT, channel: str = CHANNEL,
        qualify: Callable[[str], str] | None = None,
    ) -> None:
        self._url = url
        self._channel = channel  # kiln_<schema> for a store with a schema
        self._where = where
        self._probe = probe
        self._probe_wait = probe_wait
        self.refused: str | None = None  # why the last connection could not listen
        self._connect_timeout = connect_timeout
        self._max_backoff = max_backoff
        self._callbacks: list[NotifyCallback] = []
        self._task: asyncio.Task[None] | None = None
        self._up = False
        self._attempted = asyncio.Event()
        self.backend_pid: int | None = None  # for tests that cut the connection
        self.reconnects = 0
        self.claimer = Claimer(counter, qualify)
        self._lost: asyncio.Future[None] | None = None  # set when the connection fails
        self._pgconn: pq.abc.PGconn | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writing = False  # waiting for the socket to take the rest of a claim
        self._encoding = "utf-8"

    def up(self) -> bool:
        return self._up

    async def start(self, callback: NotifyCallback) -> None:
        """Add ``callback``; start the task once and wait for its first attempt.

        A first connection that cannot listen (``NotListening``: behind a
        transaction-mode pooler) fails the start with the reason: notifications
        would silently never come."""
        self._callbacks.append(callback)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="kiln-pg-listener")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._attempted.wait(), self._connect_timeout + self._probe_wait + 1.0
            )
        if self.refused is not None and not self._up:
            self._callbacks.remove(callback)
            if not self._callbacks:
                await self.stop()
            raise StoreError("listen", self.refused)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)  # bounded: a connect to a silent server may not end at once
        self._up = False

    async def _run(self) -> None:
        delay = 0.05
        while True:
            self.backend_pid = None
            try:
                await self._listen()
            except NotListening as exc:
                self.refused = str(exc)
                log.error("kiln listener: %s", exc)
            except (psycopg.Error, Broken) as exc:
                log.warning("kiln listener: connection lost or refused: %s", exc)
            except Exception:  # a bug reading the connection: log it, and start over
                log.exception("kiln listener: failed reading its connection")
            self._up = False
            self._attempted.set()
            if self.backend_pid is not None:  # it was up: start the backoff over
                delay = 0.05
            self.reconnects += 1
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._max_backoff)

    async def _listen(self) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self._url, autocommit=True, connect_timeout=max(int(self._connect_timeout), 1),
            keepalives=1, keepalives_idle=10, keepalives_interval=5, keepalives_count=3,
            application_name=application_name(self._url, "kiln-listener"),
        )
        loop = asyncio.get_running_loop()
        lost: asyncio.Future[None] = loop.create_future()
        pgconn, fd = conn.pgconn, conn.pgconn.socket
        encoding = conn.info.encoding
        reading = False
        try:
            await conn.execute(f"LISTEN {self._channel}")
            if self._probe is not None:
                await self._heard(conn)
            self.refused = None
            # what arrives while psycopg runs the set-up statements comes through here
            conn.add_notify_handler(lambda n: self._deliver(n.channel, n.payload))
            await self.claimer.prepare(conn)
            # from here on libpq is driven from the reader callback, psycopg not at all
            pgconn.nonblocking = 1
            self._lost, self._pgconn, self._encoding = lost, pgconn, encoding
            self._loop, self._writing = loop, False
            loop.add_reader(fd, self._readable)
            reading = True
            self.backend_pid = pgconn.backend_pid
            self._up = True
            self._attempted.set()
            if self.reconnects:  # the first "up" is the server's to report
                self._tell(up=True)
            self._readable()  # anything already buffered
            await lost
        finally:
            self._up = False
            self._pgconn = None
            if reading:
                loop.remove_reader(fd)
                loop.remove_writer(fd)
            error = lost.exception() if lost.done() and not lost.cancelled() else None
            self.claimer.lost(error or ConnectionError("the listener stopped"))
            if reading and error is not None:  # lost, not stopped
                self._tell(up=False)
            with contextlib.suppress(Exception):
                await conn.close()

    async def _heard(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Listen on a channel of this connection's own, have the probe notify it from
        another connection, and wait for it (NotListening if it never comes)."""
        assert self._probe is not None
        channel = f"kiln_probe_{uuid.uuid4().hex}"
        await conn.execute(f"LISTEN {channel}")
        await self._probe(channel)
        heard = False
        # closed before the next statement: the generator holds the connection's lock
        async with contextlib.aclosing(conn.notifies(timeout=self._probe_wait)) as notes:
            async for note in notes:
                if note.channel == channel:
                    heard = True
                    break
                self._deliver(note.channel, note.payload)  # a wake-up meanwhile
        if heard:
            await conn.execute(f"UNLISTEN {channel}")
            return
        raise NotListening(
            f"LISTEN on {self._where} did not hear its own probe notification within"
            f" {self._probe_wait:g} s: is it a transaction-mode pooler (PgBouncer,"
            " pgcat, Supavisor, RDS Proxy)? Set pooler=transaction, with listen_url= a"
            " direct or session-mode URL for notifications (else a Bus, else polling)"
        )

    def _readable(self) -> None:
        """The connection has input: claim results, then notifications; then send the
        claims those notifications call for."""
        pgconn, lost = self._pgconn, self._lost
        if pgconn is None or lost is None or lost.done():
            return
        try:
            pgconn.consume_input()
            self.claimer.read()
            while (note := pgconn.notifies()) is not None:
                self._deliver(
                    note.relname.decode(self._encoding), note.extra.decode(self._encoding)
                )
            self.claimer.pump()
            self._flush()
        except Exception as exc:  # the connection is in an unknown state: start over
            lost.set_exception(exc)

    def _flush(self) -> None:
        """Send what libpq holds; a full socket buffer waits for the socket to drain."""
        pgconn, loop = self._pgconn, self._loop
        assert pgconn is not None and loop is not None
        pending = pgconn.flush() == 1
        if pending != self._writing:  # (un)registering is a system call: only on change
            if pending:
                loop.add_writer(pgconn.socket, self._writable)
            else:
                loop.remove_writer(pgconn.socket)
            self._writing = pending

    def _writable(self) -> None:
        lost = self._lost
        if self._pgconn is None or lost is None or lost.done():
            return
        try:
            self._flush()
        except psycopg.Error as exc:
            lost.set_exception(exc)

    def _tell(self, up: bool) -> None:
        """The connection came back or was lost: subscribers hear it on channel STATE
        (kiln._client._bus), and look again when it is back (notifications were lost)."""
        self._deliver(STATE, "up" if up else "down")

    def _deliver(self, channel: str, payload: str) -> None:
        if channel == self._channel:
            channel = CHANNEL  # the callbacks know kiln's channel by this name
            self.claimer.notified(payload)
        for callback in list(self._callbacks):
            try:
                callback(channel, payload)
            except Exception:  # a callback's bug must not stop the listener
                log.exception("kiln listener: callback failed on %s %r", channel, payload)
