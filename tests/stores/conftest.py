"""Store conformance fixtures: a second store on the same database, for concurrency,
and the clock that lease and heartbeat tests advance (tests/stores/clock.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from kiln.stores import Store, store_from_url
from tests.stores.clock import clock

__all__ = ["clock", "other_store"]


@pytest.fixture
async def other_store(store: Store, store_url: str) -> AsyncIterator[Store]:
    """Another open store (its own connections) on the same, migrated database."""
    s = store_from_url(store_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
