"""``@pytest.mark.exclusive`` (tests/plugins/exclusive.py): an exclusive test waits
for the tests running beside it, and no test starts beside it until it ends."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.plugins.exclusive import turn


def test_an_exclusive_turn_waits_for_running_tests_and_holds_off_new_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", uuid.uuid4().hex)
    order: list[str] = []
    running, release, asked = threading.Event(), threading.Event(), threading.Event()

    def shared(name: str, hold: threading.Event | None = None) -> None:
        with turn(False):
            order.append(f"{name} in")
            running.set()
            if hold is not None:
                hold.wait(10)
            order.append(f"{name} out")

    def exclusive() -> None:
        asked.set()
        with turn(True):
            order.append("exclusive in")
            order.append("exclusive out")

    first = threading.Thread(target=shared, args=("first", release))
    first.start()
    assert running.wait(5)
    alone = threading.Thread(target=exclusive)
    alone.start()
    assert asked.wait(5)
    alone.join(0.3)
    assert alone.is_alive() and order == ["first in"]  # it waits for the running test
    later = threading.Thread(target=shared, args=("later",))
    later.start()
    later.join(0.3)
    assert later.is_alive()  # a test asked for after it waits behind it
    release.set()
    for t in (first, alone, later):
        t.join(5)
    assert order == ["first in", "first out", "exclusive in", "exclusive out",
                     "later in", "later out"]


def test_without_xdist_nothing_is_locked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    with turn(True), turn(True):  # would deadlock if it locked
        pass
