"""Fixtures that start real worker processes of tests.integration.app."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.plugins.workers import Admin, StartWorker, worker_starter

APP = "tests.integration.app:app"


@pytest.fixture
def start_worker(store_url: str) -> Iterator[StartWorker]:
    yield from worker_starter(store_url, APP)


@pytest.fixture
def admin(store_url: str) -> Iterator[Admin]:
    a = Admin(store_url, APP)
    yield a
    a.close()


# a project of its own, with its own pytest.ini and Django settings: run by
# test_user_project.py in a process of its own, never collected into this one
collect_ignore = ["user_project"]
