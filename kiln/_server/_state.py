"""ServerState: the lifecycle of one server, new -> running -> stopping -> stopped.

A server runs once. ``run()`` makes it running once every part started (a start that
fails goes on to stopping); ``stop()``, a signal or a cancelled ``run()`` make it
stopping; the end of the shutdown makes it stopped. ``Server.state`` and
``stats().state`` report the value, a plain string, as they always did.
"""

from __future__ import annotations

import enum


class ServerState(enum.Enum):
    NEW = "new"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"

    @property
    def before_shutdown(self) -> bool:
        """New or running: a server that may still claim and publish."""
        return self is ServerState.NEW or self is ServerState.RUNNING
