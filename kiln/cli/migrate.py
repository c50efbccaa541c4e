"""``kiln migrate``: create or upgrade kiln's tables."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kiln.cli._database import opened, url_of


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "migrate", parents=[common], help="create or upgrade kiln's tables",
        description="Apply the migrations this kiln needs; running it twice changes nothing.",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url = url_of(args)
    applied = asyncio.run(_migrate(url))
    if applied:
        print(f"applied migration(s) {', '.join(str(v) for v in applied)} to {url}")
    else:
        print(f"{url} is up to date")
    return 0


async def _migrate(url: str) -> list[int]:
    async with opened(url, migrated=False) as store:
        return await store.migrate()
