"""Fixtures for kilnotel: in-memory OpenTelemetry readers, and a real server to observe."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import kiln
from kiln.stores import Store, store_from_url
from tests.otel.jobs import make_app
from tests.support.otel import Telemetry


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    t.shutdown()


@pytest.fixture
async def client(store_url: str, app: kiln.App) -> AsyncIterator[kiln.Client]:
    """A client of ``app``'s kinds on its own open, migrated store (the test's side)."""
    store: Store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    try:
        yield kiln.Client(store, app.kinds)
    finally:
        await store.close()


@pytest.fixture
def app(store_url: str) -> kiln.App:
    return make_app(store_url)
