"""Fixtures for the cluster tests: real worker processes sharing one database.

``cluster`` starts workers (tests/cluster/worker.py) against the test's database with
short intervals, reads the JSON-lines log they all append to and their status files,
and can cut one worker off from the database: through a loopback TCP proxy on
PostgreSQL, through a gate at the store boundary on SQLite (see gate.py for why).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster


@pytest.fixture
async def cluster(store_url: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(store_url, tmp_path)
    await c.open()
    try:
        yield c
    finally:
        await c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    c = item.funcargs.get("cluster") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(c, Cluster):
        report.sections.append(("cluster", c.dump()))
