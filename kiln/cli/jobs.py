"""``kiln jobs list|show|requeue|cancel|delete``: look at jobs and act on them.

``cancel`` stops a running job's handler on whichever worker runs it (docs/operating.md,
"Cancel a running job"); one id that is unknown or finished already is an error, several
are cancelled where they can be and the others reported.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import datetime
from typing import Any

from kiln._client._bulk import BATCH, VERBS
from kiln._client._bus_redis import RedisBus
from kiln._client._cancelling import CancelResult
from kiln._client._client import Client
from kiln._client._filters import filter_of
from kiln._errors import KilnError
from kiln._model import _wire as wire
from kiln._model._job import DEAD_AFTER, JobFilter, JobState
from kiln._model._tags import parse_pair
from kiln.cli import _bulk
from kiln.cli import _output as out
from kiln.cli._argparse import Parser, UsageError
from kiln.cli._database import opened, url_of

STATES = [s.value for s in JobState]
PAGE = 500  # jobs read per page by ``list --all``


class NotFoundError(KilnError):
    """A job id that names no job."""


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    group = commands.add_parser("jobs", parents=[common], help="list, show and act on jobs")
    sub = group.add_subparsers(metavar="ACTION", required=True, parser_class=Parser)

    p = sub.add_parser("list", parents=[common], help="list jobs, newest first")
    _filter_flags(p)
    p.add_argument("--limit", type=int, default=None,
                   help="at most this many (1-1000, default 50)")
    p.add_argument("--before", type=int, default=None, metavar="ID",
                   help="only jobs older than this id: the next page after the last id shown")
    p.add_argument("--all", action="store_true",
                   help="every matching job, newest first, as JSON lines (one object a"
                   " line), read page by page in constant memory; progress on stderr")
    p.add_argument("--page-size", type=int, default=PAGE, metavar="N",
                   help=f"jobs read per page with --all (1-1000, default {PAGE})")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_list)

    p = sub.add_parser("show", parents=[common], help="show one job with its errors")
    p.add_argument("id", type=int)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run_show)

    p = sub.add_parser(
        "requeue", parents=[common],
        help="run jobs again with a full retry budget (by id, or all matching --state)",
    )
    p.add_argument("ids", type=int, nargs="*", metavar="ID")
    _filter_flags(p)
    p.add_argument("--max-id", type=int, default=None, metavar="ID",
                   help="only jobs with an id up to this one (bind to what you looked at)")
    p.add_argument("--finished-before", type=_aware_time, default=None, metavar="TIME",
                   help="only jobs that finished at or before this ISO 8601 time with a "
                   "zone, e.g. 2026-12-03T09:00:00Z (jobs that fail later stay failed)")
    p.add_argument(
        "--dead-after", type=float, default=DEAD_AFTER, metavar="SECONDS",
        help="heartbeat silence after which a server counts as dead, so a job cancelled"
        " while running on it may run again (your ServerConfig.dead_after; default 60)",
    )
    _bulk_flags(p)
    p.set_defaults(func=run_requeue)

    p = sub.add_parser(
        "cancel", parents=[common],
        help="cancel jobs that have not finished (by id or filter); a running job's"
        " handler is stopped",
    )
    p.add_argument("ids", type=int, nargs="*", metavar="ID")
    _filter_flags(p)
    p.add_argument("--max-id", type=int, default=None, metavar="ID",
                   help="only jobs with an id up to this one (bind to what you looked at)")
    p.add_argument(
        "--redis", default=None, metavar="URL",
        help="also publish the cancel on this Redis bus (workers on MySQL or SQLite with a"
        " RedisBus stop the handler at once; without it, within one heartbeat_interval)",
    )
    p.add_argument("--redis-channel", default="kiln", metavar="NAME",
                   help="the RedisBus channel of your workers (default kiln)")
    _bulk_flags(p, confirm=True)
    p.set_defaults(func=run_cancel)

    p = sub.add_parser("delete", parents=[common], help="delete jobs (by id or filter)")
    p.add_argument("ids", type=int, nargs="*", metavar="ID")
    _filter_flags(p)
    p.add_argument("--max-id", type=int, default=None, metavar="ID",
                   help="only jobs with an id up to this one (bind to what you looked at)")
    _bulk_flags(p, confirm=True)
    p.set_defaults(func=run_admin, action="delete")


def _bulk_flags(parser: argparse.ArgumentParser, *, confirm: bool = False) -> None:
    """--dry-run on every bulk command; --yes on those that confirm a stateless filter."""
    parser.add_argument("--dry-run", action="store_true",
                        help="print how many jobs match, and change nothing")
    if confirm:
        parser.add_argument(
            "--yes", action="store_true",
            help="go ahead without asking when the filter has no --state (it then matches"
            " jobs in every state, pending and running included); off a terminal it is"
            " required")
    _batch_flag(parser)


def _batch_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-size", type=int, default=BATCH, metavar="N",
        help=f"with a filter: jobs changed per transaction (1-1000, default {BATCH});"
        " progress goes to stderr",
    )


def _filter_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state", choices=STATES, help="only jobs in this state")
    parser.add_argument("--queue", help="only jobs of this queue")
    parser.add_argument("--kind", help="only jobs of this kind")
    parser.add_argument("--tag", action="append", default=[], metavar="TAG", dest="tags",
                        help="only jobs with this tag (repeat: with all of them)")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE",
                        help="only jobs whose metadata KEY equals VALUE (a number, true,"
                        ' false or "quoted" is JSON, anything else a string; repeat)')
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        dest="arg_pairs", help="only jobs whose args KEY equals VALUE"
                        " (as --meta; repeat)")


def _filter(args: argparse.Namespace, **extra: Any) -> JobFilter:
    """The filter the flags of ``args`` give (a ValidationError names a bad one)."""
    return filter_of(
        state=args.state, queue=args.queue, kind=args.kind, tags=args.tags,
        metadata=dict(parse_pair(m, "--meta") for m in args.meta),
        args=dict(parse_pair(a, "--arg") for a in args.arg_pairs), **extra,
    )


def _filtered(args: argparse.Namespace) -> bool:
    return any((args.state, args.queue, args.kind, args.tags, args.meta, args.arg_pairs))


def _aware_time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {value!r}") from None
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give a time zone (Z or +00:00): {value!r}")
    return parsed



def run_list(args: argparse.Namespace) -> int:
    job_filter = _filter(args)
    if args.all:
        if args.limit is not None or args.json:
            raise UsageError("kiln jobs list: --all prints every match as JSON lines;"
                             " leave out --limit and --json")
        _check_size("--page-size", args.page_size)
        asyncio.run(_stream(url_of(args), job_filter, args.page_size, args.before))
        return 0
    limit = 50 if args.limit is None else args.limit
    rows = asyncio.run(_list(url_of(args), job_filter, limit, args.before))
    if args.json:
        out.print_json([wire.job_json(r) for r in rows])
    elif rows:
        print(out.table(out.JOB_HEADERS, [out.job_line(r) for r in rows]))
        if len(rows) == limit:
            print(f"next page: --before {rows[-1].id}", file=sys.stderr)
    else:
        print("no jobs")
    return 0


def _check_size(flag: str, value: int) -> None:
    if not 1 <= value <= 1000:
        raise UsageError(f"kiln jobs: {flag} must be between 1 and 1000, got {value}")


async def _list(url: str, job_filter: JobFilter, limit: int, before: int | None) -> list[Any]:
    async with opened(url) as store:
        return await Client(store).list(job_filter, limit=limit, before_id=before)


async def _stream(url: str, job_filter: JobFilter, page: int, before: int | None) -> None:
    """Every match, newest first, one page in memory at a time: each page is written
    (and flushed) before the next one is read, keyed on the last id written. Progress
    goes to stderr: a line every ``_bulk.EVERY`` seconds (how many so far, and the
    ``--before`` that resumes after an interruption) and one at the end."""
    written, began = 0, time.monotonic()
    shown = began
    async with opened(url) as store:
        client = Client(store)
        while True:
            rows = await client.list(job_filter, limit=page, before_id=before)
            sys.stdout.writelines(out.json_line(wire.job_json(r)) for r in rows)
            sys.stdout.flush()
            written += len(rows)
            if len(rows) < page:
                took = time.monotonic() - began
                print(f"list --all: {written:,} jobs in {took:.1f} s", file=sys.stderr)
                return
            before = rows[-1].id
            if time.monotonic() - shown >= _bulk.EVERY:
                shown = time.monotonic()
                rate = written / max(shown - began, 1e-9)
                print(f"list --all: {written:,} jobs so far ({rate:,.0f}/s); the rest:"
                      f" --before {before}", file=sys.stderr, flush=True)


def run_show(args: argparse.Namespace) -> int:
    row = asyncio.run(_show(url_of(args), args.id))
    if row is None:
        raise NotFoundError(f"job {args.id} not found")
    if args.json:
        out.print_json(wire.job_json(row, result=True))
    else:
        print(out.job_details(row))
    return 0


async def _show(url: str, job_id: int) -> Any:
    async with opened(url) as store:
        return await Client(store).get(job_id)


def run_requeue(args: argparse.Namespace) -> int:
    if not args.ids and args.state is None:
        raise UsageError("kiln jobs requeue: give job ids, or --state (e.g. --state failed)")
    job_filter = _filter(args, ids=args.ids, max_id=args.max_id,
                         finished_before=args.finished_before)
    if args.dry_run:
        return _dry_run(args, "requeue", job_filter)
    if not args.ids:
        return _batched(args, "requeue", job_filter)
    count = asyncio.run(_admin(url_of(args), "requeue", job_filter, args.dead_after))
    print(f"requeued {count} job{'s' * (count != 1)}")
    if count < len(set(args.ids)):
        print(f"{len(set(args.ids)) - count} not requeued: missing, running, awaiting or"
              " pending, or cancelled while running on a server that is alive (that"
              " attempt may still be running; requeue once it ended)", file=sys.stderr)
    return 0


def _batched(args: argparse.Namespace, action: str, job_filter: JobFilter) -> int:
    """A filter's action in batches of --batch-size, with its progress on stderr."""
    _check_size("--batch-size", args.batch_size)
    done = asyncio.run(_bulk.run_bulk(
        url_of(args), action, job_filter, actor=out.actor(), batch_size=args.batch_size,
        dead_after=getattr(args, "dead_after", DEAD_AFTER),
        redis=getattr(args, "redis", None), channel=getattr(args, "redis_channel", "kiln"),
    ))
    print(_bulk.summary(action, done.done))
    return 0


def _dry_run(args: argparse.Namespace, action: str, job_filter: JobFilter) -> int:
    count = asyncio.run(_count(url_of(args), job_filter))
    print(f"{count} job{'s' * (count != 1)} match; dry run: nothing {VERBS[action]}")
    return 0


async def _count(url: str, job_filter: JobFilter) -> int:
    async with opened(url) as store:
        return await Client(store).count(job_filter)


def _confirmed(args: argparse.Namespace, action: str, job_filter: JobFilter) -> bool:
    """A filter without --state matches pending and running jobs too: --yes, or a "y" at
    a terminal's prompt (which names the count), before any write."""
    if args.state is not None or args.yes:
        return True
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(
            f"kiln jobs {action}: a filter without --state matches jobs in every state,"
            " pending and running included: add --yes to go ahead, or --dry-run to count"
            " them")
    count = asyncio.run(_count(url_of(args), job_filter))
    print(f"{count} job{'s' * (count != 1)} match, in every state (pending and running"
          f" included). {action.capitalize()} them? [y/N] ", end="", file=sys.stderr,
          flush=True)
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    print(f"nothing {VERBS[action]}", file=sys.stderr)
    return False


def run_cancel(args: argparse.Namespace) -> int:
    """One id: an error when it is unknown or finished. Several: those are reported."""
    if not args.ids and not _filtered(args):
        raise UsageError("kiln jobs cancel: give job ids (ID ...), or a filter"
                         " (--state, --queue, --kind, --tag, --meta, --arg)")
    ids = list(dict.fromkeys(args.ids))
    job_filter = _filter(args, ids=ids, max_id=args.max_id)
    if args.dry_run:
        return _dry_run(args, "cancel", job_filter)
    if not ids:
        if not _confirmed(args, "cancel", job_filter):
            return 1
        return _batched(args, "cancel", job_filter)
    result = asyncio.run(_cancel(url_of(args), job_filter, args.redis, args.redis_channel))
    print(f"cancelled {int(result)} job{'s' * (result != 1)}")
    if result.finished:
        listed = ", ".join(f"{i} ({s.value})" for i, s in sorted(result.finished.items()))
        print(f"{len(result.finished)} finished already, not cancelled: {listed}",
              file=sys.stderr)
    if result.missing:
        print(f"{len(result.missing)} not found: {', '.join(map(str, result.missing))}",
              file=sys.stderr)
    return 0


async def _cancel(
    url: str, job_filter: JobFilter, redis: str | None, channel: str
) -> CancelResult:
    bus = RedisBus(redis, channel) if redis else None
    ids = job_filter.ids
    try:
        async with opened(url) as store:
            client = Client(store, bus=bus)
            if len(ids) == 1 and job_filter == JobFilter(ids=ids):
                # one id alone: refused, before any write, when unknown or finished
                return await client.cancel_job(ids[0], actor=out.actor())
            return await client.cancel(job_filter, actor=out.actor())
    finally:
        if bus is not None:
            await bus.close()


def run_admin(args: argparse.Namespace) -> int:
    if not args.ids and not _filtered(args):
        raise UsageError(f"kiln jobs {args.action}: give job ids (ID ...), or a filter"
                         " (--state, --queue, --kind, --tag, --meta, --arg)")
    job_filter = _filter(args, ids=args.ids, max_id=args.max_id)
    if args.dry_run:
        return _dry_run(args, args.action, job_filter)
    if not args.ids:
        if not _confirmed(args, args.action, job_filter):
            return 1
        return _batched(args, args.action, job_filter)
    count = asyncio.run(_admin(url_of(args), args.action, job_filter))
    verb = {"delete": "deleted"}[args.action]
    print(f"{verb} {count} job{'s' * (count != 1)}")
    return 0


async def _admin(
    url: str, action: str, job_filter: JobFilter, dead_after: float = DEAD_AFTER
) -> int:
    async with opened(url) as store:
        client = Client(store)
        if action == "requeue":
            return await client.requeue(job_filter, actor=out.actor(), dead_after=dead_after)
        return await client.delete(job_filter, actor=out.actor())
