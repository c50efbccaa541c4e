"""``kiln migrate --status`` / ``--sql`` and ``kiln.sqlalchemy.upgrade`` on every database.

The SQL that ``--sql`` prints, run by the database's own client, and the Alembic helper
must leave the schema exactly where ``kiln migrate`` leaves it: ``schema_check`` passes
and ``kiln migrate`` then finds nothing to do.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

import kiln.sqlalchemy
from kiln.cli import run
from kiln.stores import _migrations, _script, store_from_url
from tests.plugins.databases import mysql_connect
from tests.support.frameworks import SYNC_DRIVER, sa_url

LATEST = _migrations.latest("kiln.stores.sqlite")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def schema_is_current(url: str) -> None:
    async def check() -> None:
        store = store_from_url(url)
        await store.open()
        try:
            await store.schema_check()
            assert await store.schema_version() == LATEST
        finally:
            await store.close()

    asyncio.run(check())


def run_script(url: str, script: str) -> None:
    scheme = urlsplit(url).scheme
    if scheme == "sqlite":
        conn = sqlite3.connect(url[len("sqlite:///"):])
        conn.executescript(script)
        conn.close()
    elif scheme == "postgresql":
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(script.encode())  # bytes: no parameters, the script as written
    else:
        from pymysql.constants import CLIENT

        my = mysql_connect(url, client_flag=CLIENT.MULTI_STATEMENTS)
        with my, my.cursor() as cur:
            cur.execute(script)
            while cur.nextset():
                pass


def test_status_lists_applied_and_pending(
    empty_store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = cli(capsys, "migrate", "--status", "--database-url", empty_store_url)
    assert code == 0 and f"schema 0, {LATEST} pending" in out
    assert "pending  0001 0001_init.sql" in out
    assert cli(capsys, "migrate", "--database-url", empty_store_url)[0] == 0
    code, out, _ = cli(capsys, "migrate", "--status", "--database-url", empty_store_url)
    assert code == 0 and f"schema {LATEST}, 0 pending" in out and "pending " not in out
    assert out.count("applied ") == LATEST


def test_sql_prints_what_migrate_would_run(
    empty_store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, script, _ = cli(capsys, "migrate", "--sql", "--database-url", empty_store_url)
    assert code == 0 and "INSERT INTO kiln_migrations (version" in script
    code, out, _ = cli(capsys, "migrate", "--status", "--database-url", empty_store_url)
    assert f"{LATEST} pending" in out  # --sql wrote nothing
    run_script(empty_store_url, script)
    schema_is_current(empty_store_url)
    code, out, _ = cli(capsys, "migrate", "--database-url", empty_store_url)
    assert code == 0 and "up to date" in out
    code, script, err = cli(capsys, "migrate", "--sql", "--database-url", empty_store_url)
    assert code == 0 and script == "" and f"schema is at version {LATEST}" in err


@pytest.mark.parametrize("dialect", sorted(_script.DIALECTS))
def test_sql_offline_for_any_dialect(dialect: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, script, _ = cli(capsys, "migrate", "--sql", "--dialect", dialect, "--from", "3")
    assert code == 0 and f"kiln migrations 4..{LATEST} ({dialect})" in script
    assert "0003_" not in script and "0004_kinds.sql" in script
    assert ("BEGIN;" in script) is (dialect != "mysql")  # MySQL commits DDL at once


def test_sql_flags_are_checked(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    code, _, err = cli(capsys, "migrate", "--dialect", "mysql", "--database-url", url)
    assert code == 2 and "--dialect and --from go with --sql" in err
    code, _, err = cli(capsys, "migrate", "--sql", "--from", "-1")
    assert code == 2 and "--from must be a version >= 0" in err
    assert cli(capsys, "migrate", "--sql", "--status")[0] == 2
    assert not (tmp_path / "k.db").exists()  # nothing written


def test_alembic_helper_applies_kiln_migrations(empty_store_url: str, backend: str) -> None:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    engine = sa.create_engine(sa_url(empty_store_url, SYNC_DRIVER[backend]))
    try:
        with engine.begin() as conn:
            op = Operations(MigrationContext.configure(conn))
            assert kiln.sqlalchemy.upgrade(op) == list(range(1, LATEST + 1))
        schema_is_current(empty_store_url)
        with engine.begin() as conn:
            assert kiln.sqlalchemy.upgrade(conn) == []
            assert kiln.sqlalchemy.schema_version(conn) == LATEST
    finally:
        engine.dispose()


def test_alembic_helper_refuses_offline_mode_and_other_types() -> None:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    ctx = MigrationContext.configure(dialect_name="postgresql", opts={"as_sql": True})
    with pytest.raises(TypeError, match="kiln migrate --sql"):
        kiln.sqlalchemy.upgrade(Operations(ctx))
    with pytest.raises(TypeError, match="not str"):
        kiln.sqlalchemy.upgrade("postgresql://")
