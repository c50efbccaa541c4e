"""The tests' one wait-for-condition helper, in an async and a sync form.

``await wait_for(condition, timeout, what)`` polls ``condition`` (a plain function or
one returning an awaitable) until it returns something truthy, and returns that value;
after ``timeout`` seconds it fails the test with a message naming ``what`` was awaited.
``wait_for_sync`` is the same for code outside an event loop (``condition`` plain).
Both check once more at the deadline, so a condition met just then still passes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

INTERVAL = 0.02


def _timed_out(timeout: float, what: str) -> AssertionError:
    return AssertionError(f"timed out after {timeout}s waiting for {what}")


@overload
async def wait_for(
    condition: Callable[[], Awaitable[T | None]], timeout: float, what: str,
    *, interval: float = INTERVAL,
) -> T: ...
@overload
async def wait_for(
    condition: Callable[[], T | None], timeout: float, what: str,
    *, interval: float = INTERVAL,
) -> T: ...
async def wait_for(
    condition: Callable[[], Any], timeout: float, what: str, *, interval: float = INTERVAL
) -> Any:
    """Poll ``condition`` (sync or async) until truthy; return its value."""
    deadline = time.monotonic() + timeout
    while True:
        late = time.monotonic() > deadline
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if late:
            raise _timed_out(timeout, what)
        await asyncio.sleep(interval)


def wait_for_sync(
    condition: Callable[[], T | None], timeout: float, what: str, *, interval: float = INTERVAL
) -> T:
    """Poll ``condition`` until truthy, blocking; return its value."""
    deadline = time.monotonic() + timeout
    while True:
        late = time.monotonic() > deadline
        value = condition()
        if value:
            return value
        if late:
            raise _timed_out(timeout, what)
        time.sleep(interval)
