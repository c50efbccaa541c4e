"""Scratch databases: an empty database of its own next to a server's URL, for tests.

PostgreSQL: a new schema in the URL's database; the URL it returns selects it with
libpq's ``options=-csearch_path``, which the user's own code (SQLAlchemy, Django) reads
too, where kiln's ``schema=`` setting is kiln's alone. (``schema=`` URLs are read here
as well; a scratch database behind a transaction-mode pooler gets one by hand.)
MySQL/MariaDB: a new database on the URL's server. Owns the only SQL that creates or
drops them; kiln.testing calls it, nothing in a server does.
"""

from __future__ import annotations

import uuid
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kiln._errors import ConfigError, UnreachableError

PREFIX = "kiln_test_"


def scheme_of(url: str) -> str:
    scheme = urlsplit(url).scheme.split("+")[0].lower()
    if scheme in ("postgresql", "postgres"):
        return "postgresql"
    if scheme in ("mysql", "mariadb"):
        return "mysql"
    if scheme == "sqlite" or url == "sqlite":
        return "sqlite"
    raise ConfigError("kiln_url", url, "use sqlite, postgresql://... or mysql://...")


async def scratch_create(base_url: str) -> str:
    """Create an empty schema (PostgreSQL) or database (MySQL); return its URL."""
    name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
    if scheme_of(base_url) == "postgresql":
        await _postgres(base_url, f"CREATE SCHEMA {name}")
        parts = urlsplit(base_url)
        query = dict(parse_qsl(parts.query))
        query["options"] = f"-csearch_path={name}"
        return urlunsplit(parts._replace(query=urlencode(query)))
    if scheme_of(base_url) == "mysql":
        await _mysql(base_url, f"CREATE DATABASE {name}")
        return urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))
    raise ConfigError("kiln_url", base_url, "scratch databases are for postgresql:// or mysql://")


async def scratch_drop(url: str) -> None:
    """Drop what ``scratch_create`` made (refuses any other name)."""
    if scheme_of(url) == "postgresql":
        name = _schema_of(url)
        _check(name, url)
        await _postgres(url, f"DROP SCHEMA IF EXISTS {name} CASCADE")
    else:
        name = urlsplit(url).path.lstrip("/")
        _check(name, url)
        await _mysql(url, f"DROP DATABASE IF EXISTS {name}")


async def scratch_reset(url: str) -> None:
    """Empty every kiln table of a PostgreSQL scratch schema, ids starting again at 1;
    the schema and its migrations stay. Refuses any schema ``scratch_create`` did not
    make; waits at most 5 s for a lock (a server left running holds one).

    DELETE and setval, in one transaction: on tables this small, a tenth of the cost
    of TRUNCATE (which makes new files) or of migrating a new schema. A foreign key in
    the way falls back to TRUNCATE ... CASCADE."""
    name = _schema_of(url)
    _check(name, url)
    import psycopg

    async with await psycopg.AsyncConnection.connect(_conninfo(url), autocommit=True,
                                                     connect_timeout=5,
                                                     prepare_threshold=None) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s"
            " AND tablename <> 'kiln_migrations' ORDER BY tablename", (name,))
        tables = [f"{name}.{r[0]}" for r in await cur.fetchall()]
        cur = await conn.execute(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = %s", (name,))
        sequences = [f"{name}.{r[0]}" for r in await cur.fetchall()]
        # every name below comes from the catalog of a schema scratch_create made
        try:
            async with conn.transaction():  # SET LOCAL: no session state (poolers)
                await conn.execute("SET LOCAL lock_timeout = '5s'")
                for table in tables:
                    await conn.execute(f"DELETE FROM {table}")
                for seq in sequences:
                    await conn.execute("SELECT setval(%s, 1, false)", (seq,))
        except psycopg.errors.ForeignKeyViolation:
            async with conn.transaction():
                await conn.execute("SET LOCAL lock_timeout = '5s'")
                await conn.execute(
                    f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")


def _schema_of(url: str) -> str:
    query = dict(parse_qsl(urlsplit(url).query))
    if "schema" in query:
        return query["schema"]
    return query.get("options", "").removeprefix("-csearch_path=")  # older scratch URLs


def _conninfo(url: str) -> str:
    """``url`` for libpq: without kiln's own parameters (schema=, pooler=, ...)."""
    from kiln.stores.postgres._settings import conninfo

    return conninfo(url)


def _check(name: str, url: str) -> None:
    if not name.startswith(PREFIX) or not name[len(PREFIX):].isalnum():
        raise ConfigError("url", url, f"not a scratch database made by kiln ({name!r})")


async def _postgres(url: str, sql: str) -> None:
    import psycopg

    try:
        conn = await psycopg.AsyncConnection.connect(_conninfo(url), autocommit=True,
                                                     connect_timeout=5, prepare_threshold=None)
    except psycopg.OperationalError as exc:
        raise UnreachableError("scratch", f"cannot reach PostgreSQL: {exc}") from exc
    async with conn:
        await conn.execute(sql)  # a name made here (scratch_create), never input


async def _mysql(url: str, sql: str) -> None:
    import asyncmy  # type: ignore[import-not-found,unused-ignore]

    from kiln.stores.mysql._store import connect_args

    args = connect_args(urlunsplit(urlsplit(url)._replace(path="/kiln")))  # any name: unused
    args.pop("db")
    try:
        conn = await asyncmy.connect(**args)
    except Exception as exc:  # asyncmy raises its own OperationalError and OSError
        raise UnreachableError("scratch", f"cannot reach MySQL: {exc}") from exc
    try:
        async with conn.cursor() as cur:
            await cur.execute(sql)
    finally:
        conn.close()
