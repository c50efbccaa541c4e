"""The event loop kiln.testing's sync functions run on: one of its own, in a thread.

A sync test calls ``drain`` or ``perform`` from plain code, an async test may call the
assertions from inside its loop: both work, because the coroutines run on this loop.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from kiln._aio._portal import Portal
from kiln._app import App

T = TypeVar("T")
_portal = Portal("kiln-testing")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return _portal.run(coro)


async def _closing(app: App, coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    finally:  # the client that the jobs' own aenqueue calls opened on this loop
        await app.aclose()


def run_for(app: App, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` here, then close what ``app`` opened on this loop meanwhile."""
    return run(_closing(app, coro))
