"""Stopping a background task without waiting on the database forever.

Used by every service, the pools and the stores' listeners, so it sits below them all.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("kiln.service")


# How long a stop waits for a cancelled task, twice. A task in a database call may not
# end at the first cancel: psycopg then asks the server to cancel the query, over a new
# connection, and waits up to 5 s + 5 s, or a pool wait runs to its timeout, which an
# unreachable database never cuts short. The second cancel interrupts that (psycopg
# closes the connection); a task still running after it is left behind, so that a stop
# never waits on the database (what it held is rescued like any stranded claim).
STOP_WAIT = 0.5


async def stop_task(task: asyncio.Task[Any] | None, wait: float = STOP_WAIT) -> None:
    """Cancel ``task`` and wait until it has finished (None is fine), at most about
    2 x ``wait``: a task that outlives a second cancel is left behind, with a warning."""
    if task is None:
        return
    for _round in range(2):
        task.cancel()
        done, _pending = await asyncio.wait({task}, timeout=wait)
        if done:
            if not task.cancelled():
                task.result()  # its exception, as awaiting it would raise
            return
    log.warning("task %s still runs %.1fs after it was cancelled twice; left behind",
                task.get_name(), 2 * wait)
