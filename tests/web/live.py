"""A live dashboard: uvicorn on a free 127.0.0.1 port in a thread of its own, and the
headless Chromium that browser tests drive (Debian's package, never a download)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from kiln.web import create_app

CHROMIUM = os.environ.get("KILN_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def chromium_or_skip() -> str:
    """The system Chromium; with CI=true a missing one fails the run instead of skipping."""
    if os.path.exists(CHROMIUM) or shutil.which(CHROMIUM):
        return CHROMIUM
    message = f"no Chromium at {CHROMIUM}: apt-get install -y chromium"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


class LiveDashboard:
    """``create_app(target, **options)`` served by uvicorn until ``stop()``."""

    def __init__(self, target: Any, **options: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(create_app(target, **options), log_level="warning",
                                lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="kiln-test-dashboard",
            daemon=True,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LiveDashboard:
        self.thread.start()
        deadline = time.monotonic() + 15.0
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the dashboard did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10.0)
        self.sock.close()


@contextlib.asynccontextmanager
async def serving(url: str, token: str) -> AsyncIterator[LiveDashboard]:
    """A LiveDashboard started for the block (off the event loop) and stopped after it."""
    dashboard = LiveDashboard(url, token=token)
    await asyncio.to_thread(dashboard.start)
    try:
        yield dashboard
    finally:
        await asyncio.to_thread(dashboard.stop)
