"""A loopback TCP proxy that cuts one worker off from PostgreSQL, two ways.

``stall()`` stops forwarding in both directions and holds new connections: requests
already sent wait in the proxy, as behind a network that drops everything, and are
delivered late on ``resume()``. ``close()`` drops every connection and refuses new
ones, as when the database goes away; ``reopen()`` accepts again.
"""

from __future__ import annotations

import asyncio
import contextlib


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._pipes: set[asyncio.Task[None]] = set()
        self.port = 0
        self.connections = 0
        self.closed = False

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.closed = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for task in list(self._pipes):
            task.cancel()
        for task in list(self._pipes):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if server is not None:
            await server.wait_closed()

    async def reopen(self) -> None:
        self.closed = False
        await self.start()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._pipes.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._flowing.wait()
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            self.connections += 1
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except OSError:
            pass
        finally:
            self._pipes.discard(task)
            for w in (writer, up_writer):
                if w is not None:
                    with contextlib.suppress(OSError, RuntimeError):
                        w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
