"""Signals: the first SIGTERM or SIGINT asks a server for a graceful shutdown, a second
one forces it; the handlers go when the server stops (tests/test_cli_worker.py runs a
worker process through a real SIGTERM)."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from kiln._server._signals import Signals, StopRequest


def _installed(stopping: bool) -> tuple[StopRequest, Signals]:
    """A bound stop request and its signal handlers, installed (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    request = StopRequest()
    request.bind()
    signals = Signals(request=request, stopping=lambda: stopping)
    signals.install()
    return request, signals


async def test_a_second_signal_forces_the_stop() -> None:
    request, signals = _installed(stopping=False)
    try:
        # a handler that did not install would let the signal kill the test process
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        signal.raise_signal(signal.SIGTERM)
        async with asyncio.timeout(5):
            await request.wait()
        assert not request.forced
        signal.raise_signal(signal.SIGINT)
        async with asyncio.timeout(5):
            while not request.forced:
                await asyncio.sleep(0.01)
    finally:
        signals.remove()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


async def test_a_signal_while_the_server_stops_for_another_reason_forces() -> None:
    """A failed start or a cancelled run() shuts down without a stop request."""
    request, signals = _installed(stopping=True)
    try:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        signal.raise_signal(signal.SIGTERM)
        async with asyncio.timeout(5):
            await request.wait()
        assert request.forced
    finally:
        signals.remove()
