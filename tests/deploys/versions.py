"""The apps of a deploy sequence, built from a Version, and the ledger their handlers
write.

The ledger's lines are the chaos suite's (tests/chaos/app.py; tests/chaos/ledger.py
reads them): ``start``, ``end`` (the handler returned: its side effect happened),
``cancelled``, and a ``fault`` of type ``raise`` when a job's args ask its handler to
fail, so that the ledger counts the retry as explained. The servers of a sequence run
in this process, so a line's ``pid`` is the number of the server that ran the attempt
(``Ledger.servers``), and its ``term`` faults name servers, not processes.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kiln
from tests.deploys.plan import Version

BACKOFF = kiln.Constant(0.05)  # a retry is due at once: a case waits on no backoff
FAIL_REASON = "550 mailbox does not exist"  # what a handler's kiln.Fail says


class Ledger:
    """The lines of one sequence, in memory, in the order they were written."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.servers: dict[int, kiln.Server] = {}  # the number its lines carry as pid
        self.versions: dict[int, str] = {}  # server number -> the version it runs
        self._execs = itertools.count(1)

    def __call__(self, ev: str, pid: int, **fields: Any) -> None:
        self.lines.append({"t": time.time(), "pid": pid, "label": f"s{pid}", "ev": ev,
                           **fields})

    def number(self, server_id: str | None) -> int:
        """The number of the server whose id (now: a rejoin gives a new one) it is."""
        return next((n for n, s in self.servers.items() if s.id == server_id), 0)

    def exec_id(self) -> str:
        return f"x{next(self._execs)}"


def handler(version: str, ledger: Ledger, knows_fail: bool = True
            ) -> Callable[[kiln.Job], Awaitable[Any]]:
    """Works ``args["seconds"]`` (0.2 by default), then raises while the attempt is below
    ``args["fail_below"]``, else returns which version ran it. With ``args["in_flight"]``
    A's handler works until its server stops it: the job is in flight when B replaces
    A, whatever the machine's speed, and B's handler (if any) runs it again. With
    ``args["fail_for_good"]`` it raises ``kiln.Fail``; a version on a kiln older than
    Fail (``knows_fail`` False) raises a plain error instead, as its code did before,
    which that kiln retries."""

    async def run(job: kiln.Job) -> Any:
        pid = ledger.number(job.row.server_id)
        exec_id = ledger.exec_id()
        ledger("start", pid, job=job.id, attempt=job.attempt, server=job.row.server_id,
               exec=exec_id, kind=job.kind, cursor=0, version=version)
        args = job.args if isinstance(job.args, dict) else {}
        try:
            if args.get("in_flight") and version == "a":
                await asyncio.Event().wait()  # until the shutdown cancels it
            await asyncio.sleep(float(args.get("seconds", 0.2)))
        except asyncio.CancelledError:
            ledger("cancelled", pid, job=job.id, exec=exec_id)
            raise
        for_good = bool(args.get("fail_for_good"))
        if for_good or job.attempt < int(args.get("fail_below", 0)):
            now = time.time()
            ledger("fault", pid, type="raise", target=pid, began=now, until=now, job=job.id,
                   exec=exec_id)
            if for_good and knows_fail:
                raise kiln.Fail(f"{FAIL_REASON} (attempt {job.attempt}, version {version})")
            raise RuntimeError(f"attempt {job.attempt} fails, as its args ask")
        ledger("end", pid, job=job.id, exec=exec_id)
        return {"version": version}

    return run


def build_app(url: str, version: Version, ledger: Ledger) -> kiln.App:
    app = kiln.App(url)
    for kind, options in version.kinds.items():
        app.register(kind, handler(version.name, ledger, version.knows_fail),
                     **{"backoff": BACKOFF, **options})
    for queue, most in version.queue_limits.items():
        app.queue_concurrency(queue, kiln.Concurrency(max=most))
    return app
