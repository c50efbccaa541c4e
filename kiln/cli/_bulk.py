"""``kiln jobs requeue|cancel|delete`` over a filter: a batched run (kiln._client._bulk) that
shows its progress on stderr, a bar on a terminal and plain lines otherwise.

Owns the progress display and the hint an interrupted run leaves: the bounds it was
bound to, so that the same command with them finishes the rest and touches nothing
that matched only later.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TextIO

from kiln._client._bulk import VERBS, Bulk, Progress
from kiln._client._bus_redis import RedisBus
from kiln._client._client import Client
from kiln._model._job import JobFilter
from kiln.cli._database import opened

BAR = 30  # characters of the progress bar
EVERY = 1.0  # seconds between two plain progress lines (the first and the last always)


class ProgressDisplay:
    """Called with each Progress: redraws a bar on a terminal; otherwise prints a line
    at most every ``every`` seconds (and always the first and the last)."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None, every: float = EVERY) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.every = every
        self._last: float | None = None

    def __call__(self, p: Progress) -> None:
        if self.tty:
            filled = round(BAR * p.fraction)
            bar = "#" * filled + "-" * (BAR - filled)
            end = "\n" if p.finished else ""
            self.stream.write(f"\r{p.action} [{bar}] {_counts(p)}{end}")
        else:
            now = time.monotonic()
            if not p.finished and self._last is not None and now - self._last < self.every:
                return
            self._last = now
            self.stream.write(f"{p.action}: {_counts(p)}{' done' * p.finished}\n")
        self.stream.flush()


def _counts(p: Progress) -> str:
    return (f"{p.seen:,}/{p.total:,} ({p.fraction:.0%}), {p.done:,} {VERBS[p.action]},"
            f" {p.batches:,} batch{'es' * (p.batches != 1)}")


def bounds_flags(f: JobFilter) -> str:
    """The flags that bind a run again to the bounds of ``f``."""
    flags = f"--max-id {f.max_id}"
    if f.finished_before is not None:
        flags += f" --finished-before {f.finished_before.isoformat()}"
    return flags


async def run_bulk(
    url: str, action: str, f: JobFilter, *, actor: str, batch_size: int,
    dead_after: float, redis: str | None = None, channel: str = "kiln",
    stream: TextIO | None = None,
) -> Progress:
    """Bind ``f``, say so on stderr, and run the batches with a progress display."""
    err = stream or sys.stderr
    bus = RedisBus(redis, channel) if redis else None
    try:
        async with opened(url) as store:
            client = Client(store, bus=bus)
            bulk = await Bulk.begin(client, action, f, actor=actor, batch_size=batch_size,
                                    dead_after=dead_after)
            err.write(f"{action}: {bulk.progress.total:,} matching jobs, bound to"
                      f" {bounds_flags(bulk.filter)}\n")
            return await _watched(bulk, ProgressDisplay(err), err)
    finally:
        if bus is not None:
            await bus.close()


async def _watched(bulk: Bulk, display: ProgressDisplay, err: TextIO) -> Progress:
    try:
        return await bulk.run(display)
    except (Exception, asyncio.CancelledError):
        p = bulk.progress
        err.write(f"\n{bulk.action}: stopped after {p.batches:,} batch"
                  f"{'es' * (p.batches != 1)} ({p.done:,} {VERBS[bulk.action]}); the same"
                  f" command with {bounds_flags(bulk.filter)} finishes the rest\n")
        raise


def summary(action: str, count: int) -> str:
    return f"{VERBS[action]} {count} job{'s' * (count != 1)}"

