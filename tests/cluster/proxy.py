"""A loopback TCP proxy that cuts one worker off from PostgreSQL, two ways.

``stall()`` stops forwarding in both directions and holds new connections: requests
already sent wait in the proxy, as behind a network that drops everything, and are
delivered late on ``resume()``. ``close()`` drops every connection and refuses new
ones, as when the database goes away; ``reopen()`` accepts again.
"""

from __future__ import annotations

import asyncio
import contextlib

from tests._listener import Listener


class Proxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = Listener(self._accept)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.port = 0
        self.connections = 0
        self.closed = False

    async def start(self) -> None:
        await self._listener.start(self.port)
        self.port = self._listener.port

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.closed = True
        await self._listener.close()

    async def reopen(self) -> None:
        self.closed = False
        await self.start()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_writer: asyncio.StreamWriter | None = None
        try:
            await self._flowing.wait()
            up_reader, up_writer = await asyncio.open_connection(*self._target)
            self.connections += 1
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer))
        except OSError:
            pass
        finally:
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
