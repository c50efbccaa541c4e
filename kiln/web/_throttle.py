"""Throttle: at most so many failed attempts per client address in a sliding window.

Owns counting failures (wrong credentials, refused state changes) by client address
and saying how long a client that used up its allowance must wait. In memory, per
process, bounded in size: it slows guessing down to ``limit`` tries per ``window``
seconds per address, which a strong token or password (see kiln.web._auth) makes
hopeless.
"""

from __future__ import annotations

import collections
import ipaddress
import math
import time
from collections.abc import Callable

FAILURE_LIMIT = 10
FAILURE_WINDOW = 60.0  # seconds
MAX_CLIENTS = 10_000  # addresses remembered; the oldest are forgotten first
IPV6_PREFIX = 64  # one IPv6 client usually holds a whole /64: count it as one


def client_key(address: str) -> str:
    """What failures are counted by: the IPv4 address, or the IPv6 address's /64."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/{IPV6_PREFIX}", strict=False))
    return str(ip)


class Throttle:
    def __init__(self, limit: int = FAILURE_LIMIT, window: float = FAILURE_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self._clock = clock
        self._failures: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )

    def _recent(self, client: str) -> collections.deque[float] | None:
        client = client_key(client)
        times = self._failures.get(client)
        if times is None:
            return None
        horizon = self._clock() - self.window
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[client]
            return None
        return times

    def retry_after(self, client: str) -> int | None:
        """Whole seconds until ``client`` may try again, or None if it may now."""
        times = self._recent(client)
        if times is None or len(times) < self.limit:
            return None
        return max(1, math.ceil(times[0] + self.window - self._clock()))

    def failed(self, client: str) -> None:
        times = self._recent(client)
        client = client_key(client)
        if times is None:
            times = self._failures[client] = collections.deque(maxlen=self.limit)
        self._failures.move_to_end(client)
        times.append(self._clock())
        while len(self._failures) > MAX_CLIENTS:
            self._failures.popitem(last=False)
