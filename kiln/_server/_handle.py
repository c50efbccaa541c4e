"""Job: what a handler receives. A read-only view of the claimed row plus checkpoints.

``params`` are checkpoints: ``await job.set_param(name, value)`` (or
``job.set_param_sync`` from a plain ``def`` handler) writes at once, fenced like
results, so a later attempt (retried, rescued or handed back) resumes from them.

``await job.dependency_results()`` (``dependency_results_sync`` from a plain ``def``)
reads the stored results of the jobs this one waited on: fan-in reads its parts.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic

from kiln._errors import FencedError
from kiln._model import _args
from kiln._model._job import JobRow

if TYPE_CHECKING:  # a default (PEP 696): a bare ``kiln.Job`` is ``kiln.Job[Any]``
    from typing_extensions import TypeVar

    ArgsT = TypeVar("ArgsT", default=Any)
else:  # Python 3.11's TypeVar takes no default; typing_extensions is not a dependency
    from typing import TypeVar

    ArgsT = TypeVar("ArgsT")

_UNREAD: Any = object()
ParamWriter = Callable[[JobRow, str, Any], Awaitable[bool]]
ResultsReader = Callable[[int], Awaitable[dict[int, Any]]]


class Job(Generic[ArgsT]):
    """What a handler receives: the claimed job (``id``, ``kind``, ``args``, ``attempt``,
    ``queue``, ``metadata``, ...), its checkpoints in ``params`` (``set_param``), the
    results of the jobs it waited on (``dependency_results``) and ``cancelled``.

    ``kiln.Job[EmailArgs]`` types ``args``: a handler that declares it gets its args
    as an ``EmailArgs`` (a dataclass or Pydantic model is rebuilt from the stored
    JSON; a TypedDict is the dict itself). A bare ``kiln.Job`` has ``Any`` args.

    Read-only apart from the checkpoints: a handler returns its result, raises to
    retry, or returns ``kiln.Snooze``/``kiln.Cancel``.
    """

    __slots__ = ("_args", "_args_type", "_cancelled", "_loop", "_reader", "_refused", "_row",
                 "_writer", "params")
    __kiln_job__ = True  # how kiln._model._args knows a ``Job[T]`` annotation

    def __init__(
        self, row: JobRow, writer: ParamWriter, loop: asyncio.AbstractEventLoop,
        reader: ResultsReader | None = None, args_type: Any = None,
    ) -> None:
        self._row = row
        self._args_type = args_type
        self._args: Any = _UNREAD
        self._writer = writer
        self._loop = loop
        self._reader = reader
        self._cancelled: threading.Event | None = None  # made on first use: most jobs never ask
        self._refused = False  # a checkpoint was refused: the job moved on (cancelled?)
        self.params: dict[str, Any] = dict(row.params)

    id = property(lambda self: self._row.id)
    kind = property(lambda self: self._row.kind)
    queue = property(lambda self: self._row.queue)
    attempt = property(lambda self: self._row.attempt)
    max_attempts = property(lambda self: self._row.max_attempts)
    metadata = property(lambda self: self._row.metadata)
    tags = property(lambda self: self._row.tags)
    priority = property(lambda self: self._row.priority)

    @property
    def args(self) -> ArgsT:
        """The job's args, as the handler's declared type (rebuilt on first read: a
        stored shape that does not fit raises here, in the handler, which retries)."""
        if self._args is _UNREAD:
            self._args = _args.decode(self._args_type, self._row.args)
        return self._args  # type: ignore[no-any-return]

    @property
    def created_at(self) -> datetime:
        return self._row.created_at

    @property
    def refused(self) -> bool:
        """A checkpoint of this attempt was refused (kiln's own use: was it cancelled?)."""
        return self._refused

    @property
    def row(self) -> JobRow:
        return self._row

    @property
    def cancelled(self) -> threading.Event:
        """Set when the server cancels this attempt (the job was cancelled, or timeout,
        shutdown or fencing).

        A ``threading.Event``: safe to read from a plain ``def`` handler's thread, which
        cannot be interrupted. Poll it (or sleep with ``job.cancelled.wait(seconds)``)
        and return when it is set; kiln records the cancellation, not a completion.
        """
        if self._cancelled is None:
            self._cancelled = threading.Event()
        return self._cancelled

    async def set_param(self, name: str, value: Any) -> None:
        if not await self._writer(self._row, name, value):
            self._refused = True
            raise FencedError(self.id, self.attempt, self._row.server_id)
        self.params[name] = value

    def set_param_sync(self, name: str, value: Any) -> None:
        """Blocking form for plain ``def`` handlers (they run in a worker thread)."""
        future = asyncio.run_coroutine_threadsafe(self.set_param(name, value), self._loop)
        future.result()

    async def dependency_results(self) -> dict[int, Any]:
        """The results of the jobs this one waited on (``depends_on``), read now: a
        mapping of dependency id to what its handler returned, in id order. A
        dependency whose handler returned None (or whose result a requeue cleared)
        maps to None; one that was deleted or pruned is absent. Empty for a job that
        waited on nothing."""
        if self._reader is None:
            raise RuntimeError("this Job was made without a store to read results from")
        return await self._reader(self.id)

    def dependency_results_sync(self) -> dict[int, Any]:
        """Blocking form for plain ``def`` handlers (they run in a worker thread)."""
        future = asyncio.run_coroutine_threadsafe(self.dependency_results(), self._loop)
        return future.result()

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.kind!r} attempt {self.attempt}/{self.max_attempts}>"
