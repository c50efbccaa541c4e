"""Fixtures of the ops tests: the Prometheus tool binaries (Debian's prometheus and
prometheus-alertmanager packages). Missing binaries skip locally and fail in CI."""

from __future__ import annotations

import pytest

from tests.support import binaries
from tests.support.binaries import Run

OPS_INSTALL = "apt-get install prometheus prometheus-alertmanager"


def _runner(name: str) -> Run:
    return binaries.runner(name, OPS_INSTALL, timeout=300)


@pytest.fixture
def promtool() -> Run:
    return _runner("promtool")


@pytest.fixture
def amtool() -> Run:
    return _runner("amtool")
