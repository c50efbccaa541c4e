"""Fixtures of the framework tests: a Django site on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.frameworks import django_site
from tests.plugins.databases import BACKENDS, mysql_database_url, postgres_schema_url

ALIASES = ["default", "pg", "my"]


@pytest.fixture(scope="session")
def site() -> Iterator[dict[str, str]]:
    schema = postgres_schema_url()  # the schema lives as long as the test session
    # and so does the MariaDB database, when the suite runs on MySQL (KILN_MYSQL)
    database = mysql_database_url() if "mysql" in BACKENDS else None
    urls = django_site.configure(next(schema), next(database) if database else None)
    yield urls
    from django.db import connections

    connections.close_all()
    next(schema, None)  # runs the rest of the generator: DROP SCHEMA
    if database is not None:
        next(database, None)  # DROP DATABASE


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest, site: dict[str, str]) -> str:
    if request.param not in site:
        pytest.skip(f"{request.param} not configured")
    return str(request.param)
