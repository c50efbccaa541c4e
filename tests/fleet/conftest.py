"""The fleet tests: a PostgreSQL-only schema URL (PgBouncer: tests/plugins/pgbouncer.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.plugins.databases import postgres_schema_url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """An empty schema of its own on the test PostgreSQL server."""
    yield from postgres_schema_url()
