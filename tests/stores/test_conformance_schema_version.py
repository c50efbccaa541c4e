"""Conformance: ``schema_version`` reads the applied version and writes nothing, and
the migration script a dialect prints (``kiln migrate --sql``) lists the same versions
as the store applies."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from kiln.stores import Store, _migrations, _script, store_from_url

VERSIONS = [v for v, _sql in _migrations.load("kiln.stores.sqlite")]


@pytest.fixture
async def fresh(empty_store_url: str) -> AsyncIterator[Store]:
    s = store_from_url(empty_store_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def test_schema_version_before_and_after_migrate(fresh: Store, empty_store_url: str) -> None:
    assert await fresh.schema_version() == 0
    if empty_store_url.startswith("sqlite:///"):
        assert not os.path.exists(empty_store_url[len("sqlite:///"):])  # reading made no file
    await fresh.migrate()
    assert await fresh.schema_version() == VERSIONS[-1]


def test_the_script_has_every_version_of_the_store(store_url: str) -> None:
    dialect = _script.dialect(urlsplit(store_url).scheme)
    assert [v for v, _ in _script.statements(dialect)] == VERSIONS
    assert [v for v, _ in _script.migrations(dialect)] == VERSIONS
    assert [v for v, _ in _script.statements(dialect, VERSIONS[-2])] == VERSIONS[-1:]
    assert _script.render(dialect, VERSIONS[-1]) == ""


def test_an_unknown_dialect_is_named() -> None:
    from kiln._errors import ConfigError

    assert _script.dialect("postgresql+psycopg").name == "postgresql"
    assert _script.dialect("mariadb").name == "mysql"
    with pytest.raises(ConfigError, match="oracle"):
        _script.dialect("oracle")
