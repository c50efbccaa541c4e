"""Fixtures of the framework tests: a Django site on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.frameworks import django_site
from tests.plugins.databases import postgres_schema_url

ALIASES = ["default", "pg"]


@pytest.fixture(scope="session")
def site() -> Iterator[dict[str, str]]:
    schema = postgres_schema_url()  # the schema lives as long as the test session
    urls = django_site.configure(next(schema))
    yield urls
    from django.db import connections

    connections.close_all()
    next(schema, None)  # runs the rest of the generator: DROP SCHEMA


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest, site: dict[str, str]) -> str:
    if request.param not in site:
        pytest.skip("postgres not configured")
    return str(request.param)
