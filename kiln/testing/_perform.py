"""perform: run one kind's handler directly, through the app's middleware and the real
Executor, with a real ``kiln.Job`` built in memory (no row, no database).

Checkpoints (``set_param``) are kept in memory and returned; args and params go
through JSON as they would through the database. Owns no outcome decision: the
Executor makes it, as in a server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Unpack

from kiln._app import App
from kiln._errors import UnknownKindError, ValidationError
from kiln._events import EventHub, JobFinished
from kiln._model import _validate
from kiln._model._build import build_job
from kiln._model._job import JobRow, JobState, Outcome
from kiln._model._options import EnqueueOptions
from kiln._server._config import ServerConfig
from kiln._server._executor import Executor, Next
from kiln._server._handle import Job
from kiln._server._identity import Identity
from kiln._server._threads import ThreadPool
from kiln.testing import _loop

SERVER_ID = "kiln-testing-perform"


@dataclasses.dataclass(slots=True)
class Performed:
    """One attempt run by ``perform``."""

    outcome: Outcome
    value: Any  # what the handler returned (None, a Snooze, a Cancel, ...)
    error: BaseException | None
    params: dict[str, Any]  # the checkpoints after the attempt
    job: Job
    delay: float | None  # seconds a retry or snooze would wait


def _through_json(what: str, value: Any) -> Any:
    _validate.check_json(what, value)
    return json.loads(json.dumps(value))


def _row(app: App, kind: str, args: Any, params: dict[str, Any] | None, attempt: int,
         options: EnqueueOptions) -> JobRow:
    if kind not in app.kinds:
        raise UnknownKindError(kind)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValidationError(f"attempt must be a whole number of at least 1, got {attempt!r}")
    new = build_job(kind, {} if args is None else args, app.kinds, **options)
    if attempt > new.max_attempts:
        raise ValidationError(f"attempt {attempt} is past max_attempts={new.max_attempts}")
    now = datetime.now(UTC)
    return JobRow(
        id=0, queue=new.queue, kind=kind, state=JobState.RUNNING,
        args=_through_json("args", new.args), params=_through_json("params", params or {}),
        metadata=_through_json("metadata", new.metadata), priority=new.priority,
        run_at=new.run_at or now, attempt=attempt, max_attempts=new.max_attempts,
        timeout=new.timeout, backoff=new.backoff, errors=[], created_at=now,
        admitted_at=None, attempted_at=now, finished_at=None, server_id=SERVER_ID,
        rate_key=new.rate_key, rescues=0, depends_on=list(new.depends_on),
    )


async def aperform(
    app: App, kind: str, args: Any = None, *, params: dict[str, Any] | None = None,
    attempt: int = 1, raise_errors: bool = True,
    dependency_results: Mapping[int, Any] | None = None,
    **options: Unpack[EnqueueOptions],
) -> Performed:
    """Run ``kind``'s handler once on the running loop; see ``perform``."""
    row = _row(app, kind, args, params, attempt, options)
    results = _results(dependency_results)
    if results:
        row = dataclasses.replace(row, depends_on=sorted(results))

    async def read_results(_job_id: int) -> dict[int, Any]:
        return dict(results)  # a fresh dict per call, as the store's read gives
    written: dict[str, Any] = dict(row.params)
    seen: dict[str, Any] = {}

    async def write(_row: JobRow, name: str, value: Any) -> bool:
        written[name] = _through_json(f"param {name!r}", value)
        return True

    async def capture(job: Job, call_next: Next) -> Any:  # innermost: sees the handler
        seen["job"] = job
        seen["value"] = value = await call_next()
        return value

    events = EventHub()
    events.subscribe(lambda e: seen.__setitem__("error", getattr(e, "error", None)),
                     types=(JobFinished,))
    threads = ThreadPool(1, name="kiln-testing-sync")
    executor = Executor(kinds=app.kinds, config=ServerConfig(), events=events, threads=threads,
                        identity=Identity.named(SERVER_ID), write_param=write,
                        middleware=[*app.middleware, capture], read_results=read_results)
    try:
        task = asyncio.get_running_loop().create_task(executor.run(row), name="kiln-perform")
        result = await task
    finally:
        threads.shutdown()
    error: BaseException | None = seen.get("error")
    if error is not None and raise_errors:
        raise error
    job = seen.get("job") or Job(row, write, asyncio.get_running_loop(), read_results,
                                   app.kinds[kind].args_type)
    job.params.update(written)
    waits = result.outcome in (Outcome.RETRY, Outcome.SNOOZED)
    return Performed(outcome=result.outcome, value=seen.get("value"), error=error,
                     params=dict(written), job=job, delay=result.run_at_delay if waits else None)


def perform(
    app: App, kind: str, args: Any = None, *, params: dict[str, Any] | None = None,
    attempt: int = 1, raise_errors: bool = True,
    dependency_results: Mapping[int, Any] | None = None,
    **options: Unpack[EnqueueOptions],
) -> Performed:
    """Run ``kind``'s handler once with a real Job (no database row): through the app's
    middleware, args and checkpoints through JSON. Raises what the handler raised
    unless ``raise_errors`` is False. ``dependency_results`` (dependency id -> result)
    is what ``job.dependency_results()`` gives, through JSON; ``{}`` without it.
    ``options`` are enqueue's."""
    return _loop.run_for(app, aperform(app, kind, args, params=params, attempt=attempt,
                                       raise_errors=raise_errors,
                                       dependency_results=dependency_results, **options))


def _results(given: Mapping[int, Any] | None) -> dict[int, Any]:
    """The dependency results a performed job reads: ids as ints, in id order, each
    result through JSON as the store would give it."""
    if given is None:
        return {}
    out: dict[int, Any] = {}
    for job_id in sorted(given):
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
            raise ValidationError(
                f"dependency_results: a dependency id is a positive int, got {job_id!r}")
        out[job_id] = _through_json(f"the result of dependency {job_id}", given[job_id])
    return out
