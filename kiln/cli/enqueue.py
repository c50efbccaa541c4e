"""``kiln enqueue KIND``: insert one job and print its id.

Uses a Client without a kind registry: the CLI cannot know which kinds a worker
handles, so any valid kind name is accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from kiln._client import Client, build_job
from kiln._errors import ValidationError
from kiln.cli._database import opened, url_of


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "enqueue", parents=[common], help="insert a job and print its id",
        description="Insert one job. Nothing is written if any option is invalid.",
    )
    parser.add_argument("kind", help="the job kind, e.g. email.send")
    parser.add_argument("--args", default="{}", metavar="JSON",
                        help="the job's arguments as JSON (default: {})")
    parser.add_argument("--queue", default="default", help="queue name (default: default)")
    parser.add_argument("--priority", type=int, default=0,
                        help="lower runs first (default: 0)")
    parser.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                        help="run no earlier than this many seconds from now")
    parser.add_argument("--max-attempts", type=int, default=25, metavar="N",
                        help="attempts before the job fails for good (default: 25)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="per-attempt timeout (default: the kind's or the worker's)")
    parser.set_defaults(func=run)


def parse_args_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"--args is not valid JSON: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    payload = parse_args_json(args.args)
    options: dict[str, Any] = {
        "queue": args.queue, "priority": args.priority, "delay": args.delay,
        "max_attempts": args.max_attempts,
    }
    if args.timeout is not None:
        options["timeout"] = args.timeout
    job_id = asyncio.run(_enqueue(url_of(args), args.kind, payload, options))
    print(job_id)
    return 0


async def _enqueue(url: str, kind: str, payload: Any, options: dict[str, Any]) -> int:
    # validate before touching the database: bad input must not even open it
    job = build_job(kind, payload, None, **options)
    async with opened(url) as store:
        ids = await Client(store).insert_many([job])
    return ids[0]
