"""The systemd unit: ``systemd-analyze verify`` accepts it (where systemd is present),
with the executable paths pointed at a stand-in since /opt/kiln does not exist here."""

from __future__ import annotations

from pathlib import Path

from tests.support.binaries import runner
from tests.support.deploy import UNIT

INSTALLED = "/opt/kiln/venv/bin/kiln"


def verify(tmp_path: Path, text: str) -> tuple[int, str]:
    analyze = runner("systemd-analyze", "apt-get install systemd", ci_needs=False)
    stand_in = tmp_path / "kiln"
    stand_in.write_text("#!/bin/sh\n", encoding="utf-8")
    stand_in.chmod(0o755)
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace(INSTALLED, str(stand_in)), encoding="utf-8")
    result = analyze(["verify", str(unit)])
    return result.returncode, result.stdout + result.stderr


def test_unit_verifies(tmp_path: Path) -> None:
    text = UNIT.read_text(encoding="utf-8")
    assert f"ExecStart={INSTALLED} worker " in text
    code, output = verify(tmp_path, text)
    assert code == 0 and output == "", output  # systemd reports bad values but exits 0


def test_verify_reports_a_broken_copy(tmp_path: Path) -> None:
    text = UNIT.read_text(encoding="utf-8").replace("TimeoutStopSec=45s",
                                                    "TimeoutStopSec=fortyfive")
    _, output = verify(tmp_path, text)
    assert "Failed to parse time value" in output


def test_unit_settings() -> None:
    lines = UNIT.read_text(encoding="utf-8").splitlines()
    assert "KillSignal=SIGTERM" in lines
    assert "TimeoutStopSec=45s" in lines
    assert any(line.startswith("Environment=") and "KILN_SHUTDOWN_TIMEOUT=30s" in line
               for line in lines)
