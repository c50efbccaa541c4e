"""The external programs some tests run (validators, promtool, amtool): found on the PATH
(or in /usr/bin), skipped when missing, and required with CI=true."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"
Run = Callable[[Sequence[str]], subprocess.CompletedProcess[str]]


def binary(name: str, install: str, *, ci_needs: bool = True) -> str:
    """The path of program ``name``; skip the test when it is missing (``install`` says how
    to get it), or fail it with CI=true when CI needs it."""
    path = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}")
                                  else None)
    if path is None:
        if ci_needs and IN_CI:
            pytest.fail(f"{name} is not installed ({install}); CI=true: it must run")
        pytest.skip(f"{name} is not installed ({install})")
    return path


def runner(name: str, install: str, *, ci_needs: bool = True,
           env: dict[str, str] | None = None, timeout: float = 90) -> Run:
    """A function that runs ``name`` with arguments and returns the completed process."""
    path = binary(name, install, ci_needs=ci_needs)

    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout,
                              check=False, env={**os.environ, **(env or {})})

    return run
