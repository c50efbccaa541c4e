"""``kiln migrate``: create or upgrade kiln's tables, show what is applied, or print the
SQL of what is pending (for a DBA to review, or for another tool's migration history)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any
from urllib.parse import urlsplit

from kiln.cli._argparse import UsageError
from kiln.cli._database import opened, url_of
from kiln.stores import _script

INSTALLATION_VERSION = 12  # the migration that made kiln_installation


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "migrate", parents=[common], help="create or upgrade kiln's tables",
        description="Apply the migrations this kiln needs; running it twice changes nothing."
        " --status, --check and --sql change nothing. The first migration of a database makes its"
        " installation id, which kiln's metrics carry as kiln_installation.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--status", action="store_true",
                      help="list the applied and the pending migrations")
    mode.add_argument("--check", action="store_true",
                      help="say, for each pending migration, whether it locks kiln_jobs"
                      " against writes and about how long it runs at the table's size")
    mode.add_argument("--sql", action="store_true",
                      help="print the SQL of the pending migrations instead of running it")
    parser.add_argument("--dialect", choices=sorted(_script.DIALECTS),
                        help="with --sql: print for this dialect without a database")
    parser.add_argument("--from", dest="above", type=int, metavar="VERSION",
                        help="with --sql: the version the database is at (no database read)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (args.dialect is not None or args.above is not None) and not args.sql:
        raise UsageError("--dialect and --from go with --sql")
    if args.above is not None and args.above < 0:
        raise UsageError(f"--from must be a version >= 0, not {args.above}")
    url = url_of(args)
    if args.sql:
        return _print_sql(args, url)
    if args.status:
        return _print_status(url)
    if args.check:
        return _print_check(url)
    applied, installation = asyncio.run(_migrate(url))
    if applied:
        print(f"applied migration(s) {', '.join(str(v) for v in applied)} to {url}")
    else:
        print(f"{url} is up to date")
    # the id kilnotel labels this installation's series with (kiln_installation)
    print(f"installation {installation}")
    return 0


def _print_sql(args: argparse.Namespace, url: str) -> int:
    offline = args.dialect is not None or args.above is not None
    dialect = _script.dialect(args.dialect or urlsplit(url).scheme)
    above = (args.above or 0) if offline else asyncio.run(_version(url))
    script = _script.render(dialect, above)
    if script:
        sys.stdout.write(script)
    else:
        print(f"-- nothing pending: the schema is at version {above}", file=sys.stderr)
    return 0


def _print_status(url: str) -> int:
    have = asyncio.run(_version(url))
    names = _script.migrations(_script.dialect(urlsplit(url).scheme))
    pending = 0
    for version, name in names:
        state = "applied" if version <= have else "pending"
        pending += state == "pending"
        print(f"{state:<8} {version:04d} {name}")
    print(f"{url}: schema {have}, {pending} pending" + (" (run `kiln migrate`)" if pending else ""))
    installation = asyncio.run(_installation(url)) if have >= INSTALLATION_VERSION else None
    if installation is not None:
        print(f"installation {installation}")
    return 0


def _print_check(url: str) -> int:
    have, rows = asyncio.run(_size(url))
    costs = _script.costs(_script.dialect(urlsplit(url).scheme), have, rows)
    if not costs:
        print(f"{url}: schema {have}, nothing pending")
        return 0
    print(f"{url}: schema {have}, {len(costs)} pending, kiln_jobs about {rows:,} rows")
    for cost in costs:
        print(cost.line())
    locking = [c for c in costs if c.locks]
    print(f"{len(locking)} of {len(costs)} lock kiln_jobs against writes" if locking
          else "none locks kiln_jobs against writes")
    return 0


async def _size(url: str) -> tuple[int, int]:
    """The applied version and kiln_jobs' estimated row count (0 before version 1)."""
    async with opened(url, migrated=False) as store:
        have = await store.schema_version()
        if have == 0:
            return 0, 0
        sizes = {s.table: s.rows for s in await store.table_sizes()}
        return have, max(sizes.get("kiln_jobs", 0), 0)


async def _version(url: str) -> int:
    async with opened(url, migrated=False) as store:
        return await store.schema_version()


async def _installation(url: str) -> str | None:
    async with opened(url, migrated=False) as store:
        return await store.installation_get()


async def _migrate(url: str) -> tuple[list[int], str | None]:
    async with opened(url, migrated=False) as store:
        applied = await store.migrate()
        return applied, await store.installation_get()
