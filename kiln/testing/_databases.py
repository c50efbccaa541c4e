"""Test databases: an empty, migrated database of its own per test.

SQLite (the default): a file copied from a template migrated once per process, so a
test's database costs a file copy. PostgreSQL: a fresh schema; MySQL/MariaDB: a fresh
database (kiln.stores._scratch), migrated, dropped after.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

from kiln.stores import store_from_url
from kiln.stores._scratch import scheme_of, scratch_create, scratch_drop, scratch_reset
from kiln.testing._loop import run

ENV = "KILN_TEST_DATABASE_URL"
_lock = threading.Lock()
_template: Path | None = None


async def _migrate(url: str) -> list[int]:
    """Open ``url``'s store, migrate it and close it: the versions applied."""
    store = store_from_url(url)
    await store.open()
    try:
        return await store.migrate()
    finally:
        await store.close()


def _sqlite_template() -> Path:
    """A migrated SQLite file, made once per process and removed at exit."""
    global _template
    with _lock:
        if _template is None:
            folder = Path(tempfile.mkdtemp(prefix="kiln-testing-"))
            atexit.register(shutil.rmtree, folder, True)
            path = folder / "template.db"
            run(_migrate(f"sqlite:///{path}"))
            _template = path
        return _template


@contextlib.contextmanager
def migrated_url(url: str | None = None, *, directory: str | os.PathLike[str] | None = None
                 ) -> Iterator[str]:
    """Yield the URL of an empty, migrated database of its own; drop it after.

    ``url``: ``None`` or a ``sqlite`` URL for a SQLite file (in ``directory``, else in a
    temporary folder removed after); ``postgresql://...`` for a fresh schema in that
    database; ``mysql://...`` for a fresh database on that server."""
    scheme = scheme_of(url or "sqlite")
    if scheme == "sqlite":
        yield from _sqlite(directory)
        return
    assert url is not None
    scratch = run(scratch_create(url))
    try:
        run(_migrate(scratch))
        yield scratch
    finally:
        run(scratch_drop(scratch))


def _sqlite(directory: str | os.PathLike[str] | None) -> Iterator[str]:
    template = _sqlite_template()
    own = directory is None
    folder = Path(tempfile.mkdtemp(prefix="kiln-test-")) if own else Path(directory or ".")
    path = folder / f"kiln-test-{uuid.uuid4().hex[:8]}.db"
    shutil.copyfile(template, path)
    try:
        yield f"sqlite:///{path}"
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)


class SessionDatabases:
    """The databases of one pytest session. PostgreSQL: one schema, migrated once and
    emptied before each test (a fresh schema per test costs its migrations, ~0.3 s);
    SQLite and MySQL: a database per test (``migrated_url``)."""

    def __init__(self, base: str | None) -> None:
        self.base = base
        self.scheme = scheme_of(base or "sqlite")
        self._shared: str | None = None

    @contextlib.contextmanager
    def for_test(self, directory: str | os.PathLike[str]) -> Iterator[str]:
        if self.scheme != "postgresql":
            with migrated_url(self.base, directory=directory) as url:
                yield url
            return
        if self._shared is None:
            assert self.base is not None
            shared = run(scratch_create(self.base))
            self._shared = shared
            run(_migrate(shared))
        else:
            run(scratch_reset(self._shared))
        yield self._shared

    def close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            run(scratch_drop(shared))
