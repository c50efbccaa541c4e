"""``kiln enqueue KIND``: insert one job and print its id.

The CLI holds no handlers: a kind's options come from the declaration its servers
published (``kiln kinds``), like any producer's; an option given on the command line
wins. A kind nothing has published is still enqueued, with the defaults, and a note
on stderr says so (its workers may simply not have started yet).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from kiln._client._client import Client
from kiln._errors import ConfigError, ValidationError
from kiln._model._build import build_job
from kiln._model._job import EnqueueResult, JobState
from kiln._model._unique import ACTIVE, Unique
from kiln.cli._database import opened, url_of


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "enqueue", parents=[common], help="insert a job and print its id",
        description="Insert one job. Nothing is written if any option is invalid.",
    )
    parser.add_argument("kind", help="the job kind, e.g. email.send")
    parser.add_argument("--args", default="{}", metavar="JSON",
                        help="the job's arguments as JSON (default: {})")
    parser.add_argument("--queue", default=None,
                        help="queue name (default: the kind's declaration, else default)")
    parser.add_argument("--priority", type=int, default=None,
                        help="lower runs first (default: the kind's declaration, else 0)")
    parser.add_argument("--delay", type=float, default=0.0, metavar="SECONDS",
                        help="run no earlier than this many seconds from now")
    parser.add_argument("--max-attempts", type=int, default=None, metavar="N",
                        help="attempts before the job fails for good"
                        " (default: the kind's declaration, else 25)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="per-attempt timeout (default: the kind's or the worker's)")
    parser.add_argument("--tag", action="append", default=None, metavar="TAG", dest="tags",
                        help="tag the job (repeat for more); given, these replace the"
                        " kind's declared tags")
    parser.add_argument("--meta", action="append", default=None, metavar="NAME=VALUE",
                        dest="meta", help="a metadata entry (repeat for more); VALUE is"
                        " read as JSON when it parses (42, true, \"x\"), else as text")
    parser.add_argument("--rate-key", default=None, metavar="KEY",
                        help="the job's rate key (default: the kind's, or the key its"
                        " rate limit derives from args or metadata)")
    parser.add_argument("--unique-by", action="append", default=None, metavar="PART",
                        help="enqueue unique by args, args.NAME or queue (repeat for"
                        " more); replaces the kind's unique declaration")
    parser.add_argument("--unique-key", default=None, metavar="KEY",
                        help="enqueue unique under a key of your own")
    parser.add_argument("--unique-period", type=float, default=None, metavar="SECONDS",
                        help="with --unique-by/--unique-key: one job per key per period")
    parser.add_argument("--unique-states", default=None, metavar="STATES",
                        help="with --unique-by/--unique-key: finished states that count"
                        " too, comma separated (completed,failed,cancelled)")
    parser.set_defaults(func=run)


def parse_args_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"--args is not valid JSON: {exc}") from exc


def parse_meta(entries: list[str] | None) -> dict[str, Any] | None:
    if entries is None:
        return None
    out: dict[str, Any] = {}
    for entry in entries:
        name, sep, text = entry.partition("=")
        if not sep or not name:
            raise ValidationError(f"--meta {entry!r}: use NAME=VALUE")
        try:
            out[name] = json.loads(text)
        except json.JSONDecodeError:
            out[name] = text
    return out


def parse_unique(args: argparse.Namespace) -> Unique | None:
    if args.unique_by is None and args.unique_key is None:
        if args.unique_period is not None or args.unique_states is not None:
            raise ValidationError("--unique-period and --unique-states go with --unique-by"
                                  " or --unique-key")
        return None
    states: tuple[JobState, ...] = ACTIVE
    if args.unique_states:
        try:
            states = ACTIVE + tuple(JobState(s.strip()) for s in args.unique_states.split(","))
        except ValueError as exc:
            raise ValidationError(f"--unique-states: {exc}") from exc
    try:
        return Unique(by=tuple(args.unique_by or ("args",)), key=args.unique_key,
                      states=states, period=args.unique_period)
    except ConfigError as exc:
        raise ValidationError(f"--unique: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    payload = parse_args_json(args.args)
    given = {"queue": args.queue, "priority": args.priority, "max_attempts": args.max_attempts,
             "timeout": args.timeout, "tags": args.tags, "metadata": parse_meta(args.meta),
             "rate_key": args.rate_key, "unique": parse_unique(args)}
    options: dict[str, Any] = {k: val for k, val in given.items() if val is not None}
    options["delay"] = args.delay
    build_job(args.kind, payload, None, **options)  # bad input must not even open the database
    job_id, declared = asyncio.run(_enqueue(url_of(args), args.kind, payload, options))
    if not declared:
        print(f"kiln: note: no server has published kind {args.kind!r}: enqueued with the"
              " defaults and the options given (see `kiln kinds`)", file=sys.stderr)
    if not job_id.inserted:
        print(f"kiln: note: not inserted: unique job {job_id} of kind {args.kind!r} exists",
              file=sys.stderr)
    print(job_id)
    return 0


async def _enqueue(
    url: str, kind: str, payload: Any, options: dict[str, Any]
) -> tuple[EnqueueResult, bool]:
    """Insert the job through a Client, so the kind resolves as for any producer."""
    async with opened(url) as store:
        client = Client(store)
        await client.catalog.ensure((kind,))
        ids = await client.enqueue_many([client.build(kind, payload, **options)])
        return ids[0], client.declaration(kind) is not None
