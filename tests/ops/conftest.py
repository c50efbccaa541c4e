"""Fixtures of the ops tests: the Prometheus tool binaries (Debian's prometheus and
prometheus-alertmanager packages). Missing binaries skip locally and fail in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"

Run = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                  else None)
    if path is None:
        message = f"{name} is not installed (apt-get install prometheus prometheus-alertmanager)"
        if IN_CI:
            pytest.fail(f"{message}; CI=true: the ops suite must run")
        pytest.skip(message)
    return path


def _runner(name: str) -> Run:
    path = binary(name)

    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([path, *args], capture_output=True, text=True, timeout=60,
                              check=False)

    return run


@pytest.fixture
def promtool() -> Run:
    return _runner("promtool")


@pytest.fixture
def amtool() -> Run:
    return _runner("amtool")
