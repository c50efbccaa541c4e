"""The installation id a process's telemetry is labelled with: read once, in the
background, from the database a server (or the exporter) uses.

Owns that one read. It is made on the loop of the server that asks (its first heartbeat
pokes it), never on a scrape; a failed read is tried again at the next poke. Until it
succeeds, ``kiln.build.info`` is exported without ``kiln.installation``, and the
monitoring mixin's rules leave that target out of every per-installation aggregate.
"""

from __future__ import annotations

import asyncio
import logging

from kiln import Client

log = logging.getLogger("kilnotel.installation")


class Installation:
    __slots__ = ("_client", "_task", "id")

    def __init__(self, client: Client, known: str | None = None) -> None:
        self._client = client
        self._task: asyncio.Task[str | None] | None = None
        self.id = known

    def poke(self) -> None:
        """On a running loop: read the id in the background unless known or reading."""
        if self.id is not None or self._task is not None:
            return
        self._task = asyncio.get_running_loop().create_task(
            self.read(), name="kilnotel-installation")

    async def read(self) -> str | None:
        """Read the id now (once known, it is kept); a failure is logged, not raised."""
        try:
            self.id = self.id or await self._client.installation()
        except Exception as exc:  # the next heartbeat tries again
            log.debug("kilnotel: reading the installation id failed: %s", exc)
        finally:
            self._task = None
        return self.id
