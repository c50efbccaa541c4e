"""Identity: this server's registration, one object that every part holds by reference.

A fenced server rejoins under a new id (kiln._server._heartbeat). The id used to be
copied into each part, and a copy that was not refreshed named the old registration:
now the executor, the pools, the heartbeat, the elector, the governor, the reconciler
and the server's context all hold this one object and read ``.id`` at each use, and
``rejoined`` (called by the heartbeat once the new registration is written) is the
only place that changes it. No part keeps a copy of the id.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from datetime import UTC, datetime

from kiln._model._job import ServerInfo
from kiln._version import VERSION


def new_server_id(host: str) -> str:
    return f"{host[:40]}-{uuid.uuid4().hex[:12]}"


class Identity:
    __slots__ = ("info",)

    def __init__(self, info: ServerInfo) -> None:
        self.info = info  # as registered; replaced, never mutated, on a rejoin

    @classmethod
    def named(cls, server_id: str) -> Identity:
        """A bare registration under ``server_id`` for parts run without a server
        (kiln.testing, unit tests)."""
        return cls(ServerInfo(
            id=server_id, host=socket.gethostname(), pid=os.getpid(), queues={}, kinds=[],
            version=VERSION, started_at=datetime.now(UTC),
        ))

    @property
    def id(self) -> str:
        return self.info.id

    def renewed(self) -> ServerInfo:
        """The registration a rejoin writes: this server under a new id."""
        return dataclasses.replace(self.info, id=new_server_id(self.info.host))

    def rejoined(self, info: ServerInfo) -> None:
        """The new registration is written: from now on every part uses its id."""
        self.info = info
