"""A TCP proxy on loopback that a test can cut and restore, to drop a connection to
Redis or PostgreSQL without touching the shared server."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from tests._listener import Listener


class _Pipe:
    """One proxied connection: muted, it forwards requests but drops the replies."""

    __slots__ = ("muted", "task")

    def __init__(self, task: asyncio.Task[None]) -> None:
        self.task = task
        self.muted = False


class Proxy:
    """Forwards 127.0.0.1:<port> to ``target``; ``cut()`` closes every connection and
    refuses new ones until ``restore()``; while ``frozen`` it keeps connections open but
    drops everything sent either way (a peer that went silent); ``lose_reply()`` drops
    the reply to one request, ``hold()`` delays one."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = Listener(self._accept)
        self.port = 0
        self.frozen = False
        self._lose: tuple[Callable[[bytes], bool], asyncio.Future[asyncio.Task[None]]] | None
        self._lose = None
        self._hold: tuple[Callable[[bytes], bool], float] | None = None

    def hold(self, request: Callable[[bytes], bool], seconds: float) -> None:
        """Hold the next request matching ``request`` for ``seconds`` before passing it
        on (and what follows it on that connection): a slow COMMIT, say."""
        self._hold = (request, seconds)

    def lose_reply(self, request: Callable[[bytes], bool]) -> asyncio.Future[asyncio.Task[None]]:
        """The next connection to send bytes matching ``request`` gets no more replies
        (the request itself goes through). The future gives that connection's task: the
        test cancels it, dropping the connection, once the request took effect, as when a
        network loses a reply and then the connection."""
        future: asyncio.Future[asyncio.Task[None]] = asyncio.get_running_loop().create_future()
        self._lose = (request, future)
        return future

    async def start(self) -> None:
        await self._listener.start(self.port)
        self.port = self._listener.port

    async def cut(self) -> None:
        await self._listener.close()

    async def restore(self) -> None:
        await self.start()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        pipe = _Pipe(task)
        try:
            await asyncio.gather(self._pump(reader, up_writer, pipe, False),
                                 self._pump(up_reader, writer, pipe, True))
        finally:
            for w in (writer, up_writer):
                w.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pipe: _Pipe,
        replies: bool,
    ) -> None:
        try:
            while data := await reader.read(65536):
                lose = self._lose
                if not replies and lose is not None and lose[0](data):
                    self._lose = None
                    pipe.muted = True
                    lose[1].set_result(pipe.task)
                hold = self._hold
                if not replies and hold is not None and hold[0](data):
                    self._hold = None
                    await asyncio.sleep(hold[1])
                if not self.frozen and not (replies and pipe.muted):
                    writer.write(data)
                    await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
