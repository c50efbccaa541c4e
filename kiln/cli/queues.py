"""``kiln queues [pause|resume|concurrency|limit]``: look at queues and steer them in an
incident.

``kiln queues`` lists every known queue: active or paused (since when, by whom), the
concurrency of each server serving it, and its jobs by state. The actions change the
controls in the database (audited as ``cli:<user>``); every server applies them within
one notification, or within its poll_interval (docs/operating.md, "In an incident").
``kiln queues limit QUEUE --remove`` removes a queue's fleet-wide limit
(app.queue_concurrency), which otherwise lasts while a live server declares it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kiln._client._client import Client
from kiln._client._queues import LimitRemoved, QueueState
from kiln._model._job import JobState
from kiln.cli import _output as out
from kiln.cli._argparse import Parser, UsageError
from kiln.cli._database import opened, url_of

_STATES = ("available", "running", "scheduled", "pending", "awaiting", "failed")


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser(
        "queues", parents=[common], help="list queues; pause, resume, change concurrency"
    )
    group.add_argument("--json", action="store_true", help="print JSON")
    group.set_defaults(func=run_list)
    sub = group.add_subparsers(metavar="ACTION", required=False, parser_class=Parser)
    for action, text in (
        ("pause", "stop every server claiming from QUEUE (\"*\": every queue); running"
                  " jobs finish, enqueueing still works"),
        ("resume", "let servers claim from QUEUE again (\"*\": lift every pause)"),
    ):
        p = sub.add_parser(action, parents=[common], help=text)
        p.add_argument("queue", metavar="QUEUE")
        p.set_defaults(func=run_pause, action=action)
    p = sub.add_parser(
        "concurrency", parents=[common],
        help="run at most N jobs of QUEUE at once per server, without a restart"
             " (\"reset\": back to what each server was started with)",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("n", metavar="N", help="0 to 10000, or reset")
    p.add_argument("--server", default=None, metavar="ID",
                   help="only this server (an id from kiln servers); default: every server")
    p.set_defaults(func=run_concurrency)
    p = sub.add_parser(
        "limit", parents=[common],
        help="remove the fleet-wide concurrency limit of QUEUE (app.queue_concurrency)"
             " now; a limit no live server declares goes by itself",
    )
    p.add_argument("queue", metavar="QUEUE")
    p.add_argument("--remove", action="store_true", required=True,
                   help="remove it (a limit is declared in code; this only takes one away)")
    p.set_defaults(func=run_limit)


def _count(text: str) -> int | None:
    if text == "reset":
        return None
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"kiln queues concurrency: N must be a number or reset, got {text!r}"
                         ) from None


async def _with_client(url: str, action: str, *args: Any) -> Any:
    async with opened(url) as store:
        client = Client(store)
        if action == "pause":
            return await client.pause_queue(args[0], actor=out.actor())
        if action == "resume":
            return await client.resume_queue(args[0], actor=out.actor())
        if action == "limit":
            return await client.remove_queue_limit(args[0], actor=out.actor())
        if action == "concurrency":
            return await client.set_concurrency(args[0], args[1], server=args[2],
                                                actor=out.actor())
        return await client.queues()


def run_pause(args: argparse.Namespace) -> int:
    result = asyncio.run(_with_client(url_of(args), args.action, args.queue))
    if args.action == "pause":
        print(f"paused {args.queue}" if result else f"{args.queue} was paused already")
    else:
        print(f"resumed {args.queue}" if result else f"{args.queue} was not paused")
    return 0


def run_concurrency(args: argparse.Namespace) -> int:
    n = _count(args.n)
    asyncio.run(_with_client(url_of(args), "concurrency", args.queue, n, args.server))
    where = f"server {args.server}" if args.server else "every server"
    what = "the configured concurrency" if n is None else f"concurrency {n}"
    print(f"{args.queue}: {what} on {where}")
    return 0


def run_limit(args: argparse.Namespace) -> int:
    removed: LimitRemoved = asyncio.run(_with_client(url_of(args), "limit", args.queue))
    if removed.max is None:
        print(f"{args.queue} has no fleet-wide concurrency limit: nothing removed")
        return 0
    print(f"removed the concurrency limit of {args.queue} (at most {removed.max} at once)")
    if removed.live:
        print(f"kiln: note: still declared by live server(s) {', '.join(removed.live)}:"
              " each puts it back when it starts again; remove app.queue_concurrency"
              f"({args.queue!r}, ...) from their code", file=sys.stderr)
    return 0


def run_list(args: argparse.Namespace) -> int:
    states: list[QueueState] = asyncio.run(_with_client(url_of(args), "list"))
    if args.json:
        out.print_json([state_json(s) for s in states])
    elif states:
        headers = ("QUEUE", "STATE", "CONCURRENCY", *(s.upper() for s in _STATES),
                   "PAUSED SINCE", "PAUSED BY")
        print(out.table(headers, [_line(s) for s in states]))
    else:
        print("no queues")
    return 0


def _concurrency(state: QueueState) -> str:
    parts = []
    for sid, n in sorted(state.concurrency.items()):
        changed = "*" if n != state.configured.get(sid) else ""
        parts.append(f"{sid}={n}{changed}")
    return " ".join(parts) or "-"


def _line(state: QueueState) -> list[str]:
    pause = state.pause
    return [
        state.queue, "paused" if pause else "active", _concurrency(state),
        *(str(state.counts.get(s, 0)) for s in _STATES),
        pause.paused_at.isoformat(timespec="seconds") if pause else "",
        pause.paused_by + (" (*)" if pause.queue == "*" else "") if pause else "",
    ]


def state_json(state: QueueState) -> dict[str, Any]:
    pause = state.pause
    return {
        "queue": state.queue,
        "state": "paused" if pause else "active",
        "paused_since": pause.paused_at.isoformat() if pause else None,
        "paused_by": pause.paused_by if pause else None,
        "paused_as": pause.queue if pause else None,
        "concurrency": state.concurrency,
        "configured": state.configured,
        "counts": {s.value: state.counts.get(s.value, 0) for s in JobState},
    }
