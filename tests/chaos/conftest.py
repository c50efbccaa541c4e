"""Chaos fixtures: the run's directory, and its ledger and worker output on failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    tmp = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(tmp, Path):
        parts = [f"--- {p.name} ---\n{p.read_text()[-2000:]}" for p in sorted(tmp.glob("*.stderr"))
                 if p.stat().st_size]
        ledger = tmp / "ledger.jsonl"
        if ledger.exists():
            parts.append(f"--- ledger (last lines) ---\n{ledger.read_text()[-4000:]}")
        report.sections.append(("chaos", "\n".join(parts)))
