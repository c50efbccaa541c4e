"""Flow fixtures: worker processes of tests.flow.app on the test's database, an admin
handle in the test process, and a Redis bus channel of the test's own."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from tests.plugins.workers import Admin, StartWorker, worker_starter

REDIS_URL = os.environ.get("KILN_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
APP = "tests.flow.app:app"


@pytest.fixture
def admin(store_url: str) -> Iterator[Admin]:
    a = Admin(store_url, APP)
    yield a
    a.close()


@pytest.fixture
def bus_env() -> dict[str, str]:
    """Environment that gives worker processes a RedisBus on a channel of this test."""
    return {"KILN_TEST_BUS": REDIS_URL, "KILN_TEST_BUS_CHANNEL": f"kiln-{uuid.uuid4().hex[:10]}"}


@pytest.fixture
def start_worker(store_url: str) -> Iterator[StartWorker]:
    yield from worker_starter(store_url, APP)
