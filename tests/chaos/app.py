"""The jobs the chaos suite runs, and the ledger they write outside the database.

Every attempt appends one JSON line per step to the run's ledger (``Log``: one
O_APPEND ``write`` per line, so a line is whole or absent even under SIGKILL):
``start`` (with the cursor it resumes from), ``ckpt`` (a checkpoint the database
acknowledged), ``refused`` (a checkpoint refused by the fence), ``cancelled`` and
``end`` (the handler returned: its side effect happened). Each attempt has an
``exec`` id of its own, since a handed-back job runs again under the same attempt
number. ``tests/chaos/ledger.py`` checks these lines against the database.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from typing import Any

import kiln
from tests.cluster.worker import Log

QUEUE = "chaos"
MAX_ATTEMPTS = 50  # rescues use attempts; a run must never exhaust them
BACKOFF = kiln.Constant(0.2)
LIMIT = kiln.RateLimit(rate=4, per=1.0, burst=2)
_execs = itertools.count(1)


def _begin(log: Log, job: kiln.Job) -> tuple[str, int]:
    exec_id = f"{os.getpid()}-{next(_execs)}"
    cursor = int(job.params.get("cursor", 0))
    log("start", job=job.id, attempt=job.attempt, server=job.row.server_id, exec=exec_id,
        kind=job.kind, cursor=cursor)
    return exec_id, cursor


def build_app(url: str, log: Log) -> kiln.App:
    # KILN_CHAOS_MAX_CONNS: each process's pool (tests/fleet: 2, behind PgBouncer)
    pool = os.environ.get("KILN_CHAOS_MAX_CONNS")
    app = (kiln.App(url, max_conns=int(pool)) if pool and not url.startswith("sqlite")
           else kiln.App(url))
    options: dict[str, Any] = {"queue": QUEUE, "max_attempts": MAX_ATTEMPTS,
                               "backoff": BACKOFF}

    @app.job("chaos.steps", **options)
    async def steps(job: kiln.Job) -> None:
        """``steps`` steps of ``step`` seconds, a checkpoint after each."""
        exec_id, cursor = _begin(log, job)
        try:
            for i in range(cursor, int(job.args["steps"])):
                await asyncio.sleep(float(job.args["step"]))
                sent = time.time()
                try:
                    await job.set_param("cursor", i + 1)
                except kiln.FencedError:
                    log("refused", job=job.id, exec=exec_id, cursor=i + 1)
                    raise
                log("ckpt", job=job.id, exec=exec_id, cursor=i + 1, sent=sent)
        except asyncio.CancelledError:
            log("cancelled", job=job.id, exec=exec_id)
            raise
        log("end", job=job.id, exec=exec_id)

    @app.job("chaos.steps_sync", **options)
    def steps_sync(job: kiln.Job) -> None:
        """The plain ``def`` form, written as the guide asks: it polls ``job.cancelled``
        between steps, since a thread cannot be interrupted."""
        exec_id, cursor = _begin(log, job)
        for i in range(cursor, int(job.args["steps"])):
            time.sleep(float(job.args["step"]))
            if job.cancelled.is_set():
                log("cancelled", job=job.id, exec=exec_id)
                raise kiln.Shutdown("cancelled between steps")
            sent = time.time()
            try:
                job.set_param_sync("cursor", i + 1)
            except kiln.FencedError:
                log("refused", job=job.id, exec=exec_id, cursor=i + 1)
                raise
            log("ckpt", job=job.id, exec=exec_id, cursor=i + 1, sent=sent)
        log("end", job=job.id, exec=exec_id)

    @app.job("chaos.limited", rate_limit=LIMIT, **options)
    async def limited(job: kiln.Job) -> None:
        exec_id, _cursor = _begin(log, job)
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            log("cancelled", job=job.id, exec=exec_id)
            raise
        log("end", job=job.id, exec=exec_id)

    return app


app = build_app(
    os.environ.get("KILN_DATABASE_URL", "sqlite:///kiln-chaos.db"),
    Log(os.environ.get("KILN_CHAOS_LOG", os.devnull), "cli"),
)
