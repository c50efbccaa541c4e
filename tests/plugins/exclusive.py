"""``@pytest.mark.exclusive``: a test that runs with no other test beside it.

The suite runs on two xdist workers. A test whose assertion is a latency bound of a
few tens of milliseconds (tests/flow/test_delayed_latency.py) measures its neighbour
as much as kiln when the other worker runs a chaos test beside it. So every test holds
a shared lock while it runs (setup and teardown included) and an exclusive test the
lock alone; a gate in front makes the exclusive one wait only for the tests already
running, not for every test the other worker starts after it asked. The locks are
files of this run (xdist's run id) in the temporary folder; without xdist nothing is
locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def turn(exclusive: bool) -> Iterator[None]:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    base = Path(tempfile.gettempdir()) / f"kiln-tests-{run}"
    with open(f"{base}.gate", "a") as gate, open(f"{base}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if exclusive:  # keeps the gate: the other worker's next test waits at it
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    with turn(item.get_closest_marker("exclusive") is not None):
        yield
