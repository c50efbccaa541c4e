"""kiln's pytest plugin: the ``kiln_app``, ``kiln_jobs`` and ``kiln_database_url``
fixtures, and the ``kiln_app`` / ``kiln_url`` settings (docs/testing.md).

Loaded for every pytest run where kiln is installed (entry point ``pytest11``, named
``kiln.testing.pytest_plugin``), so it lives outside the ``kiln`` package: loading it
imports nothing of kiln, which is imported when a test first asks for one of its
fixtures, and no database is opened before then. ``kiln.testing.pytest_plugin`` is the
same plugin under the name ``-p`` and ``pytest_plugins`` use.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kiln import App
    from kiln.testing import KilnJobs

URL_ENV = "KILN_TEST_DATABASE_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kiln", "kiln job runner")
    group.addoption(
        "--kiln-url", dest="kiln_url", default=None, metavar="URL",
        help="where the kiln fixtures make each test's database: sqlite (the default),"
             " postgresql://... (a schema per session, emptied before each test) or"
             " mysql://... (a database per test)",
    )
    group.addoption(
        "--kiln-app", dest="kiln_app", default=None, metavar="MODULE:NAME",
        help="the kiln.App (or a factory taking the database URL) that kiln_app gives",
    )
    parser.addini("kiln_url", "where the kiln fixtures make each test's database "
                  "(see --kiln-url)", default=None)
    parser.addini("kiln_app", "the kiln.App, as module:attribute, that kiln_app gives "
                  "(see --kiln-app)", default=None)


def _setting(config: pytest.Config, name: str, env: str | None = None) -> str | None:
    """Command line, then the environment, then the ini file (as pytest-django does)."""
    value = config.getoption(name)
    if not value and env:
        value = os.environ.get(env)
    if not value:
        value = config.getini(name)
    return str(value) if value else None


def load_target(spec: str) -> Any:
    """``module:attribute`` (or ``module.attribute``) to the object it names."""
    module_name, sep, attribute = spec.partition(":")
    if not sep:
        module_name, _dot, attribute = spec.rpartition(".")
    if not module_name or not attribute:
        raise pytest.UsageError(f"kiln_app = {spec!r}: name it as module:attribute")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise pytest.UsageError(f"kiln_app = {spec!r}: cannot import {module_name}: {exc}") \
            from exc
    target = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise pytest.UsageError(
                f"kiln_app = {spec!r}: {module_name} has no attribute {attribute!r}"
            ) from exc
    return target


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """After a test that used ``kiln_app``: close the client its event loop opened (an
    ``await app.aenqueue``), while that loop is still open; async test plugins close
    the loop before fixtures are torn down."""
    try:
        return (yield)
    finally:
        app = getattr(item, "funcargs", {}).get("kiln_app")
        if app is not None:
            from kiln.testing._binding import close_clients

            close_clients(app)


@pytest.fixture(scope="session")
def _kiln_databases(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Where this session's test databases come from (kiln.testing._databases)."""
    from kiln.testing._databases import SessionDatabases

    databases = SessionDatabases(_setting(request.config, "kiln_url", URL_ENV))
    yield databases
    databases.close()


@pytest.fixture
def kiln_database_url(_kiln_databases: Any, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty, migrated database of this test's own."""
    with _kiln_databases.for_test(tmp_path) as url:
        yield url


@pytest.fixture
def kiln_app(request: pytest.FixtureRequest) -> Iterator[App]:
    """The App under test, on this test's database (the ``kiln_app`` setting names it).
    An App that enqueues on a framework's connection (``kiln.contrib.django.App``) stays
    on that framework's database, which the framework's test set-up owns."""
    import kiln
    from kiln.testing import bound
    from kiln.testing._binding import close_stores

    spec = _setting(request.config, "kiln_app")
    if spec is None:
        app = kiln.App(request.getfixturevalue("kiln_database_url"))
        yield app
        close_stores(app)
        app._portal.close()
        return
    target = load_target(spec)
    if isinstance(target, kiln.App):
        own = getattr(target, "_testing_database_url", None)
        url = own() if callable(own) else request.getfixturevalue("kiln_database_url")
        with bound(target, url):
            yield target
        return
    if not callable(target):
        raise pytest.UsageError(
            f"kiln_app = {spec!r} is a {type(target).__name__}: name a kiln.App, or a"
            " function that takes the database URL and returns one"
        )
    made = target(request.getfixturevalue("kiln_database_url"))
    if not isinstance(made, kiln.App):
        raise pytest.UsageError(f"kiln_app = {spec!r} returned {made!r}, not a kiln.App")
    yield made
    close_stores(made)
    made._portal.close()


@pytest.fixture
def kiln_jobs(kiln_app: App) -> KilnJobs:
    """Assertions, drain and perform bound to ``kiln_app``."""
    from kiln.testing import KilnJobs

    return KilnJobs(kiln_app)
