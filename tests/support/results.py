"""What the results-path tests (tests/results) share."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import kiln
from tests.flow.proxy import Proxy

# the ``serve`` fixture: ``await serve(app, queues, store=None, **config)`` starts
# ``app``'s server (on ``store`` when given) with fast settings and returns it running
Serve = Callable[..., Awaitable[kiln.Server]]


async def proxied(url: str) -> tuple[Proxy, str]:
    """A started TCP proxy to ``url``'s database server and ``url`` through it."""
    parts = urlsplit(url)
    default = 5432 if parts.scheme.startswith("postgres") else 3306
    proxy = Proxy(parts.hostname or "127.0.0.1", parts.port or default)
    await proxy.start()
    netloc = parts.netloc.rsplit("@", 1)
    host = f"{parts.hostname}:{proxy.port}"
    return proxy, urlunsplit(parts._replace(
        netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))
