"""``kiln kinds``: the kinds servers published, their options, and who handles each.

One line per distinct declaration of a kind. The newest one is in use (producers
without the handlers enqueue with it); when live servers publish more than one
declaration of a kind, every one is shown with its servers and the kind is counted
as a conflict (the ``kiln_kind_conflicts`` gauge counts the same). Then one line per
queue and kind whose available jobs no live server handles (``Client.unhandled``; the
``kiln_jobs_unhandled`` gauge counts the same): a kind no server ever declared, or one
a deploy moved to another queue.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any

from kiln._client._client import Client
from kiln._client._unhandled import Unhandled
from kiln._model._job import PublishedKind
from kiln.cli import _output as out
from kiln.cli._database import opened, url_of

HEADERS = ("KIND", "QUEUE", "PRIORITY", "MAX ATTEMPTS", "TIMEOUT", "BACKOFF", "RATE LIMIT",
           "IN USE", "SERVERS")


@dataclasses.dataclass
class Variant:
    """One distinct declaration of a kind, with the live servers that publish it."""

    options: dict[str, Any]
    digest: str
    published_at: str
    in_use: bool
    servers: list[str] = dataclasses.field(default_factory=list)


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "kinds", parents=[common], help="list the kinds servers declared, and conflicts"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def grouped(rows: Sequence[PublishedKind]) -> dict[str, list[Variant]]:
    """Rows (newest first within a kind) as kind -> its declarations, newest first."""
    kinds: dict[str, dict[str, Variant]] = {}
    for row in rows:
        d = row.declaration
        variants = kinds.setdefault(d.kind, {})
        variant = variants.get(d.digest)
        if variant is None:
            variant = variants[d.digest] = Variant(
                d.options, d.digest, row.published_at.isoformat(), in_use=not variants
            )
        if row.live:
            variant.servers.append(row.server_id)
    return {kind: list(v.values()) for kind, v in kinds.items()}


def conflicted(variants: Sequence[Variant]) -> bool:
    return sum(1 for v in variants if v.servers) > 1


async def _rows(url: str) -> tuple[list[PublishedKind], list[Unhandled]]:
    async with opened(url) as store:
        return await store.kinds_list(), await Client(store).unhandled()


def run(args: argparse.Namespace) -> int:
    rows, waiting = asyncio.run(_rows(url_of(args)))
    kinds = grouped(rows)
    clashes = sorted(k for k, variants in kinds.items() if conflicted(variants))
    if args.json:
        out.print_json({"kinds": [
            {"kind": k, "conflict": k in clashes,
             "declarations": [dataclasses.asdict(v) for v in variants]}
            for k, variants in kinds.items()
        ], "conflicts": len(clashes), "unhandled": [dataclasses.asdict(u) for u in waiting]})
        return 0
    if not kinds:
        print("no kinds published: a server publishes its kinds when it starts")
    else:
        print(out.table(HEADERS, [_line(k, v) for k, variants in kinds.items()
                                  for v in variants]))
    if clashes:
        print(f"conflicts: {', '.join(clashes)} declared differently by live servers;"
              " producers without the handlers use the newest declaration (IN USE)")
    for u in waiting:
        print(_unhandled_line(u))
    return 0


def _unhandled_line(u: Unhandled) -> str:
    jobs = f"{u.jobs} job{'s' if u.jobs != 1 else ''} waiting in queue {u.queue}"
    if not u.declared:
        return (f"{u.kind}: undeclared: {jobs}, no live server handles this kind (they"
                " follow its declaration once a server of it starts)")
    return f"{u.kind}: {jobs}, where no live server handles this kind"


def _line(kind: str, v: Variant) -> list[str]:
    o = v.options
    rate = o.get("rate_limit")
    limit = "-" if not rate else f"{rate['rate']}/{rate['per']:g}s+{rate['burst']}"
    if rate and o.get("rate_key") not in (None, kind):
        limit += f" key {o['rate_key']}"
    backoff = o.get("backoff")
    return [
        kind, str(o.get("queue")), str(o.get("priority")), str(o.get("max_attempts")),
        "-" if o.get("timeout") is None else f"{o['timeout']:g}s",
        "-" if not backoff else str(backoff.get("type")), limit, "yes" if v.in_use else "",
        ",".join(v.servers) or "(none live)",
    ]
