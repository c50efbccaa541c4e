"""Type-checking a user's module with mypy strict, as a user of kiln would (the tests of
options, typed handles and Drained's counts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the project's mypy settings, without its package list
MYPY_INI = ("[mypy]\nstrict = True\n[mypy-croniter.*,asyncmy.*,uvicorn.*,django.*]\n"
            "ignore_missing_imports = True\n")


def mypy_user_module(tmp_path: Path, source: str) -> tuple[Path, str]:
    """Write ``source`` to ``tmp_path/user.py``, check it with mypy strict from the
    repository root; return the file's path and mypy's output."""
    user = tmp_path / "user.py"
    user.write_text(source)
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
         "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), str(user)],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False,
    )
    return user, result.stdout
