"""ruff and strict mypy run inside the test suite, so the README's one test command is
the whole quality bar; and CI runs exactly that command."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINTED = [
    name
    for name in (
        "kiln", "kilnotel", "kiln_pytest", "tests", "bench", "deploy", "dashboards", "mixin",
    )
    if (ROOT / name).is_dir()
]


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.timeout(600)
def test_ruff_is_clean() -> None:
    result = _run("ruff", "check", "--output-format", "concise", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(600)
def test_mypy_strict_is_clean() -> None:
    result = _run("mypy")  # packages and strictness come from pyproject.toml
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


def test_ci_runs_exactly_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    match = re.search(r"^TEST_COMMAND=(.+)$", script, re.MULTILINE)
    assert match, ".ci/run must set TEST_COMMAND"
    command = shlex.split(match.group(1))[0]
    readme = (ROOT / "README.md").read_text()
    assert f"\n{command}\n" in readme, command
    assert "set -euo pipefail" in script
    assert re.search(r"\b5\)", script) or "-eq 5" in script, "pytest exit code 5 must fail"
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111, ".ci/run must be executable"
