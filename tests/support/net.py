"""Network helpers of the tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback TCP port that nothing listens on (at the time of asking)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
