"""``kiln servers``: the registered servers, their heartbeat age, the database
connections each one's process holds (as its last heartbeat said), and the leader."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kiln._model import _wire as wire
from kiln._model._job import ServerInfo
from kiln.cli import _output as out
from kiln.cli._database import opened, url_of


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "servers", parents=[common], help="list registered servers and the leader"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


async def _servers(url: str) -> tuple[list[ServerInfo], str | None]:
    async with opened(url) as store:
        return await store.server_list(), await store.leader_get()


def run(args: argparse.Namespace) -> int:
    servers, leader = asyncio.run(_servers(url_of(args)))
    if args.json:
        shown = [wire.server_json(s, leader) for s in servers]
        out.print_json({"leader": leader, "servers": shown})
        return 0
    if not servers:
        print("no servers registered")
    else:
        rows = [_line(s, leader) for s in servers]
        print(out.table(("ID", "HOST", "PID", "QUEUES", "HEARTBEAT AGE", "CONNS", "LEADER"),
                        rows))
    if leader is not None and all(s.id != leader for s in servers):
        print(f"leader: {leader} (not registered)")
    return 0


def _line(info: ServerInfo, leader: str | None) -> list[str]:
    age = "-" if info.heartbeat_age is None else f"{info.heartbeat_age:.1f}s"
    queues = ",".join(f"{q}={n}" for q, n in sorted(info.queues.items()))
    conns = "-" if info.connections is None else str(info.connections)
    return [info.id, info.host, str(info.pid), queues, age, conns,
            "yes" if info.id == leader else ""]
