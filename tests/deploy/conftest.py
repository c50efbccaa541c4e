"""Fixtures of the deploy tests: ``kiln check-deploy`` run in-process. The paths of the
shipped files and the offline validators are in tests/support/deploy.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kiln.cli import run as kiln_run
from tests.support.deploy import Checked


@pytest.fixture
def check_deploy(capsys: pytest.CaptureFixture[str]) -> Callable[..., Checked]:
    """``kiln check-deploy ARGS`` through the CLI's own dispatcher."""

    def check(*args: str | Path) -> Checked:
        capsys.readouterr()
        code = kiln_run(["check-deploy", *map(str, args)])
        captured = capsys.readouterr()
        return Checked(code, captured.out, captured.err)

    return check
