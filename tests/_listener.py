"""A loopback TCP listener for the tests' proxies that closes every socket it accepted.

``asyncio.start_server`` cannot be closed safely while connections arrive: a socket it
has accepted but not yet wrapped (its transport is made one loop step later) meets a
closed ``Server``, whose ``_attach`` assertion fails inside the loop; the exception is
swallowed and the half-made transport and its socket are left to the garbage
collector, which reports them as unclosed (a ``ResourceWarning`` that pytest turns
into a failure of whichever test is running). The proxies cut connections by closing
their listener, so they hit that window.

Here the listening socket is read by a reader callback that accepts synchronously, so
closing it (removing the callback, closing the socket) leaves no accept in flight; each
accepted socket is handed to a task that is tracked from the moment it exists, and a
socket whose task never got to wrap it is closed by the task's done-callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _closed(writer: asyncio.StreamWriter) -> None:
    """Close ``writer`` and wait until its socket is closed; a peer that does not read
    what is still buffered gets the connection aborted after a second."""
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), 1.0)
    except (Exception, asyncio.CancelledError):
        writer.transport.abort()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await writer.wait_closed()


class Listener:
    """Accepts connections on 127.0.0.1 and runs ``handle(reader, writer)`` for each in
    a task of its own. ``close()`` refuses new connections at once, cancels every
    handler, and returns when every accepted socket is closed."""

    def __init__(self, handle: Handler) -> None:
        self._handle = handle
        self._sock: socket.socket | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self, port: int = 0) -> None:
        """Listen on ``port`` (0: any free port, then kept in ``self.port``)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
            sock.listen(128)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self.port = sock.getsockname()[1]
        asyncio.get_running_loop().add_reader(sock.fileno(), self._accept_all, sock)

    async def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _accept_all(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # the socket was closed under us, or the system is out of fds
                return
            conn.setblocking(False)
            self._spawn(conn)

    def _spawn(self, conn: socket.socket) -> None:
        wrapped = False

        async def serve() -> None:
            nonlocal wrapped
            try:
                reader, writer = await asyncio.open_connection(sock=conn)
            except BaseException:
                conn.close()
                raise
            wrapped = True
            try:
                await self._handle(reader, writer)
            except asyncio.CancelledError:
                writer.transport.abort()  # cut: drop what is still buffered, at once
                raise
            finally:
                await _closed(writer)

        def done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not wrapped:  # cancelled before it ran: nothing else owns the socket
                conn.close()

        task = asyncio.get_running_loop().create_task(serve())
        self._tasks.add(task)
        task.add_done_callback(done)
