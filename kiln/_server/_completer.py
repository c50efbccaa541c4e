"""Completer: buffers the results of attempts and writes them in batches.

Owns the results buffer and its writer task. Results are made writable as they come
in (kiln._model._sanitise). A write that fails because the database is unreachable keeps
the batch and tries again with backoff (results are fenced, so writing one twice is
harmless). Any other failure may be one result the store refuses, or one whose row
another transaction holds locked past the database's timeout (a user's transaction
that enqueued a dependent of the job, say), so the batch is split in halves until that
result stands alone and the others are written. A result whose row stays locked
(contended) is parked: kept apart and tried again after a backoff of its own (0.1 s
doubling to 10 s) until the lock is gone. A refused one is written again without what
the store may have refused (``ResultPoisoned``): with its outcome, without its stored
result, with an error that says why. A completed attempt is never recorded as failed.
Should even that fail, it goes to the back of the buffer; once other results were
written meanwhile and it failed three times, it is dropped (``ResultDropped``, logged)
and its job, still running under this server, is left to reconciliation (a hand-back)
or to a rescue. One result can never hold the others.

Per result, the store says whether it applied. A result that applied nothing is
counted and logged (``ResultsUnapplied``): its job was fenced, rescued or cancelled,
or the claim that ran it never committed. The last of them are kept (bounded) for the
reconciler, which writes one again should its job still be running here.

The writer task is watched: should it crash, that is logged, counted
(``CompleterCrashed``), reported by ``healthy()`` and the task restarted.
Backpressure: ``over_limit`` tells pools to stop claiming while the buffer is full.

Stored results (kiln._model._results) make a result up to max_result_bytes long, so a batch
also stops at BATCH_RESULT_CHARS of them (it takes at least one result), which keeps
one write under MariaDB's max_allowed_packet. Results of None, the common case, are
not counted and take the plain path.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable

from kiln._aio._tasks import stop_task
from kiln._errors import StoreError, UnreachableError
from kiln._events import (
    CompleterCrashed,
    EventHub,
    ResultDropped,
    ResultPoisoned,
    ResultsUnapplied,
    StoreFailed,
)
from kiln._model._job import AttemptError, JobResult
from kiln._model._sanitise import capped, sanitised, writable
from kiln._server._config import ServerConfig
from kiln.stores import Store

log = logging.getLogger("kiln.completer")
STRIKES = 3  # failed writes of a result and of its replacement before it is dropped
KEPT_UNAPPLIED = 1_000  # unapplied results kept for the reconciler
CRASH_HOLD = 30.0  # seconds healthy() reports a crash of the writer task
UNREACHABLE = (UnreachableError, OSError, TimeoutError)
PARK_FIRST = 0.1  # seconds before a result whose row was locked is tried again...
PARK_MAX = 10.0  # ...doubling up to this
BATCH_RESULT_CHARS = 1024 * 1024  # characters of stored results per batch (<= 4 MiB of UTF-8)


@dataclasses.dataclass(slots=True)
class _Parked:
    due: float  # monotonic
    tries: int
    result: JobResult


@dataclasses.dataclass(slots=True)
class _Strikes:
    count: int
    written: int  # Completer.written when the result first failed


class Completer:
    def __init__(
        self,
        *,
        store: Store,
        config: ServerConfig,
        events: EventHub,
        on_released: Callable[[dict[str, int], str], None],
        on_scheduled: Callable[[float], None] = lambda delay: None,
        on_applied: Callable[[], None] = lambda: None,
    ) -> None:
        self._store = store
        self._on_applied = on_applied  # results left running: slots of limited keys free
        self._config = config
        self._events = events
        self._on_released = on_released
        self._on_scheduled = on_scheduled
        self._buffer: collections.deque[JobResult] = collections.deque()
        self._wake = asyncio.Event()
        self._full = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._inflight: list[JobResult] = []
        # results the database would not take now because a row was locked (contended),
        # kept apart with a backoff of their own while the others flow: job id -> parked
        self._parked: dict[int, _Parked] = {}
        self._flushing = False
        self._strikes: dict[int, _Strikes] = {}
        self._unapplied: collections.OrderedDict[int, JobResult] = collections.OrderedDict()
        self._result_chars = 0  # characters of stored results in the buffer
        self.written = 0
        self.failures = 0
        self.poisoned = 0
        self.dropped = 0
        self.unapplied = 0
        self.crashes = 0
        self.failing_since: float | None = None  # monotonic; writes fail since then
        self.last_error: BaseException | None = None
        self.crashed_at: float | None = None  # monotonic
        self.crash_error: BaseException | None = None

    @property
    def pending(self) -> int:
        return len(self._buffer) + len(self._inflight) + len(self._parked)

    @property
    def over_limit(self) -> bool:
        return self.pending >= self._config.results_max_pending

    @property
    def failing_for(self) -> float:
        """Seconds since writes began to fail (0 while they succeed)."""
        since = self.failing_since
        return 0.0 if since is None else time.monotonic() - since

    @property
    def alive(self) -> bool:
        """The writer task runs (or the completer was never started or is stopped)."""
        task = self._task
        return task is None or not task.done()

    def health_problems(self) -> list[str]:
        """Why the results path cannot make progress, for ``Server.healthy()``."""
        problems = []
        if not self.alive:
            problems.append("results writer stopped: it crashed and is restarting")
        crashed = self.crashed_at
        if crashed is not None and time.monotonic() - crashed < CRASH_HOLD:
            problems.append(f"results writer crashed {self.crashes} times, last "
                            f"{time.monotonic() - crashed:.1f}s ago: {self.crash_error!r}")
        if self.failing_for > 2 * self._config.heartbeat_interval:
            problems.append(f"results not written for {self.failing_for:.1f}s: "
                            f"{self.pending} waiting, last error {self.last_error!r}")
        return problems

    def held(self) -> set[int]:
        """Ids of the jobs whose results wait here to be written."""
        return {r.job_id for r in (*self._buffer, *self._inflight)} | set(self._parked)

    def take_unapplied(self, job_id: int, attempt: int) -> JobResult | None:
        """The kept result of ``job_id``'s ``attempt`` that applied nothing, if any."""
        result = self._unapplied.get(job_id)
        if result is None or result.attempt != attempt:
            return None
        del self._unapplied[job_id]
        return result

    async def wait_for_room(self) -> None:
        await self._room.wait()

    def push(self, result: JobResult) -> None:
        if result.result is not None:
            self._result_chars += len(result.result)
        self._buffer.append(sanitised(result))
        if len(self._buffer) >= self._config.results_batch:
            self._full.set()
        if self.over_limit:
            self._room.clear()
        self._wake.set()

    async def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._spawn()

    def _spawn(self) -> None:
        task = asyncio.get_running_loop().create_task(self._loop(), name="kiln-completer")
        task.add_done_callback(self._ended)
        self._task = task

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The writer task ended: when it crashed, say so at once and restart it."""
        if task.cancelled() or self._stopping or task is not self._task:
            return
        error = task.exception()
        self.crashes += 1
        self.crashed_at = time.monotonic()
        self.crash_error = error
        log.error("kiln results writer crashed (%d times); restarting it", self.crashes,
                  exc_info=error)
        self._events.emit(CompleterCrashed(error=error or RuntimeError("writer task returned")))
        delay = min(0.05 * 2 ** min(self.crashes, 7), 5.0)
        asyncio.get_running_loop().call_later(delay, self._restart, task)

    def _restart(self, crashed: asyncio.Task[None]) -> None:
        if self._task is crashed and not self._stopping:
            self._spawn()

    async def stop(self, timeout: float = 10.0) -> None:
        """Flush what is buffered (up to ``timeout``), then stop the writer."""
        if self._task is None:
            return
        self._flushing = True  # parked results are due now: one more try each
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self.pending:
                    self._wake.set()
                    await asyncio.sleep(0.005)
        self._stopping = True
        task, self._task = self._task, None
        with contextlib.suppress(Exception):
            await stop_task(task)
        if self._buffer:
            log.warning("%d results could not be written; their jobs will be rescued",
                        len(self._buffer))

    async def _full_or(self, timeout: float) -> None:
        self._full.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._full.wait()

    async def _loop(self) -> None:
        delay = 0.0
        interval = float(self._config.results_flush_interval)
        while True:
            self._unpark()
            if not self._buffer:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._next_due()):
                        await self._wake.wait()
                continue
            if delay:
                await asyncio.sleep(delay)
            elif len(self._buffer) < self._config.results_batch:
                # gather what finishes in the next few ms: one round trip for all of it
                await self._full_or(interval)
            size = min(len(self._buffer), self._config.results_batch)
            if self._result_chars:
                batch = self._take_bounded(size)
            else:
                batch = [self._buffer.popleft() for _ in range(size)]
            if not batch:
                continue
            self._inflight = batch
            try:
                left = await self._write(batch)
            except BaseException:  # cancelled, or a crash (restarted): nothing is lost
                self._buffer.extendleft(reversed(batch))
                self._result_chars += _chars(batch)
                raise
            finally:
                self._inflight = []
            self._buffer.extendleft(reversed(left))
            self._result_chars += _chars(left)
            failing = self.failing_since is not None
            delay = min(max(delay * 2, 0.05), 2.0) if failing else 0.0
            if not self.over_limit:
                self._room.set()

    def _park(self, result: JobResult) -> None:
        """Keep a result whose row stays locked apart, to try again after its backoff."""
        parked = self._parked.get(result.job_id)
        tries = 1 if parked is None else parked.tries + 1
        wait = min(PARK_FIRST * 2 ** (tries - 1), PARK_MAX)
        self._parked[result.job_id] = _Parked(time.monotonic() + wait, tries, result)

    def _unpark(self) -> None:
        """Parked results that are due go to the front of the buffer."""
        if not self._parked:
            return
        now = time.monotonic()
        due = [p for p in self._parked.values() if self._flushing or p.due <= now]
        for parked in due:
            del self._parked[parked.result.job_id]
            self._buffer.appendleft(parked.result)
            self._result_chars += _chars([parked.result])

    def _next_due(self) -> float | None:
        """Seconds until the first parked result is due (None: nothing parked)."""
        if not self._parked:
            return None
        return max(min(p.due for p in self._parked.values()) - time.monotonic(), 0.0)

    def _take_bounded(self, size: int) -> list[JobResult]:
        """Up to ``size`` results from the buffer, stopping before their stored results
        pass BATCH_RESULT_CHARS (the first one is always taken)."""
        batch: list[JobResult] = []
        chars = 0
        while self._buffer and len(batch) < size:
            stored = self._buffer[0].result
            n = 0 if stored is None else len(stored)
            if batch and chars + n > BATCH_RESULT_CHARS:
                break
            chars += n
            batch.append(self._buffer.popleft())
        self._result_chars -= chars
        return batch

    async def _write(self, batch: list[JobResult]) -> list[JobResult]:
        """Write ``batch``, isolating the results the store refuses and those whose rows
        stay locked (parked); return what is left to write again later (the database
        could not be reached)."""
        parts = [batch]
        while parts:
            part = parts.pop()
            try:
                applied = await self._store.job_results_apply(part)
            except Exception as exc:  # maybe one bad result: split until it stands alone
                self._failed(exc)
                if isinstance(exc, UNREACHABLE):
                    return [*part, *(r for p in reversed(parts) for r in p)]
                if len(part) > 1:  # a locked row, or a bad result: which one?
                    middle = len(part) // 2
                    parts.extend((part[middle:], part[:middle]))
                elif _contended(exc):  # its row is locked (a user's transaction): later
                    self._park(part[0])
                elif not await self._replace(part[0], exc):
                    self._strike(part[0], exc)
                continue
            self._done(part, applied.applied_ids, applied.released)
        return []

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        self.last_error = exc
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self._events.emit(StoreFailed(operation="job_results_apply", error=exc))

    def _done(
        self, part: list[JobResult], applied_ids: Iterable[int], released: dict[str, int]
    ) -> None:
        self.failing_since = None
        self.written += len(part)
        applied = set(applied_ids)
        missed = [r for r in part if r.job_id not in applied]
        for r in part:
            self._strikes.pop(r.job_id, None)
        if missed:
            self._missed(missed)
        if released:
            self._on_released(released, "dependencies")
        if applied:
            self._on_applied()
        delays = [r.run_at_delay for r in part if r.run_at_delay > 0 and r.job_id in applied]
        if delays:  # retries and snoozes: the releaser must look when they are due
            self._on_scheduled(min(delays))

    def _missed(self, missed: list[JobResult]) -> None:
        self.unapplied += len(missed)
        for r in missed:
            self._unapplied[r.job_id] = r
            self._unapplied.move_to_end(r.job_id)
        while len(self._unapplied) > KEPT_UNAPPLIED:
            self._unapplied.popitem(last=False)
        log.info("%d results applied nothing (jobs %s): fenced, rescued or cancelled, or "
                 "their claim never committed", len(missed),
                 ", ".join(str(r.job_id) for r in missed[:10]))
        self._events.emit(ResultsUnapplied(job_ids=tuple(r.job_id for r in missed)))

    async def _replace(self, result: JobResult, exc: BaseException) -> bool:
        """Write ``result`` again with its outcome but without what the store may have
        refused (its stored result, its error text, a delay past an hour), and an error
        that says why; True once written."""
        why = capped(writable(f"{type(exc).__name__}: {exc}"), 500)
        error = AttemptError(
            attempt=result.attempt, at=time.time(), server_id=result.server_id,
            error=f"kiln could not write this attempt's result ({result.outcome.value}):"
                  f" {why}",
        )
        replacement = dataclasses.replace(
            result, error=error, result=None, run_at_delay=min(result.run_at_delay, 3600.0),
        )
        try:
            applied = await self._store.job_results_apply([replacement])
        except Exception as again:
            self._failed(again)
            return False
        self.poisoned += 1
        log.error("the result of job %s could not be written (%s); it was written as a "
                  "failed attempt instead", result.job_id, why)
        self._events.emit(ResultPoisoned(job_id=result.job_id, outcome=result.outcome,
                                         error=exc))
        self._done([replacement], applied.applied_ids, applied.released)
        return True

    def _strike(self, result: JobResult, exc: BaseException) -> None:
        """Neither the result nor its replacement could be written: try again later,
        behind the others; drop it after STRIKES failures once others were written."""
        strikes = self._strikes.setdefault(result.job_id, _Strikes(0, self.written))
        strikes.count += 1
        if strikes.count < STRIKES or self.written == strikes.written:
            self._buffer.append(result)
            self._result_chars += _chars([result])
            return
        del self._strikes[result.job_id]
        self.dropped += 1
        log.error("dropping the result of job %s after %d failed writes (%r); the job stays "
                  "running until reconciliation hands it back or it is rescued",
                  result.job_id, strikes.count, exc)
        self._events.emit(ResultDropped(job_id=result.job_id, outcome=result.outcome,
                                        error=exc))


def _contended(exc: BaseException) -> bool:
    """The database gave up waiting for a lock (or the statement's time): the same
    result may be written once the other transaction is gone."""
    return isinstance(exc, StoreError) and exc.contended


def _chars(results: Iterable[JobResult]) -> int:
    """Characters of the stored results of ``results``."""
    return sum(len(r.result) for r in results if r.result is not None)
