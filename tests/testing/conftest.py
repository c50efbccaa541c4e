"""The fixture the drain tests share: an App on a migrated database of each backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import kiln


@pytest.fixture
def app(store_url: str) -> Iterator[kiln.App]:
    app = kiln.App(store_url)
    app.migrate()
    yield app
    app.close()
