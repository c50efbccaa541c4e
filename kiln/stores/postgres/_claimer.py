"""Claims on notifications: the ClaimWatches idle pools arm, run on the LISTEN connection.

Owns the armed watches and the one batch of claims in flight on the listener's
connection. When a notification for a queue with armed watches arrives, it sends
BEGIN, one prepared claim per watch and a flush request in one trip; the moment the
rows come back it hands them to the watches' callbacks, so the jobs start, and only
then sends COMMIT. The commit's WAL flush, the connection pool and the asyncio task
hops of an ordinary claim are all off the path from a notification to a running job
(bench/RESULTS.md, "Pickup latency").

It speaks libpq directly (psycopg.pq), driven by the listener's reader callback: it
never awaits and touches the connection only inside the listener's calls. Any error
on the connection ends it (``Broken``): the listener drops the connection, which
rolls back a claim not yet committed, and reconnects. Reconnecting is the listener's
job, not this module's.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg import abc, pq
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer

from kiln._errors import StoreError, UnreachableError
from kiln._model._job import JobRow
from kiln.stores._protocol import ClaimCallback, ClaimRun
from kiln.stores.postgres import _jobs
from kiln.stores.postgres._plan import Counter

log = logging.getLogger("kiln.stores.postgres")
_NAME = _jobs.CLAIM_PREPARED.encode()
_OK = (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK, pq.ExecStatus.PIPELINE_SYNC)


class Broken(Exception):
    """The LISTEN connection cannot go on: the listener drops it and reconnects."""


class _State(enum.Enum):
    ARMED = "armed"  # claims on the next notification for its queue
    SENT = "sent"  # in the batch in flight, rows not back yet
    DELIVERED = "delivered"  # its rows went to the callback; the commit is on its way
    SPENT = "spent"  # took jobs, commit settled
    CLOSED = "closed"


class Watch:
    """One pool's armed claim (kiln.stores.ClaimWatch)."""

    def __init__(
        self, claimer: Claimer, queue: str, params: Sequence[Buffer | None],
        on_claimed: ClaimCallback,
    ) -> None:
        self.queue = queue
        self.params = params  # the prepared claim's, dumped by psycopg
        self.on_claimed = on_claimed
        self.state = _State.ARMED
        self.runs: list[ClaimRun] = []
        self.error: StoreError | None = None
        self.jobs: list[JobRow] = []
        self._more = False
        self._claimer = claimer
        self._settled = asyncio.Event()
        self._settled.set()

    @property
    def active(self) -> bool:
        return self.state in (_State.ARMED, _State.SENT)

    @property
    def more(self) -> bool:
        return self._more

    @property
    def delivered(self) -> bool:
        """Its rows went to the callback and the commit is on its way (it may have been
        closed meanwhile, when the commit took longer than ``close``'s timeout)."""
        return self.state is _State.DELIVERED or (
            self.state is _State.CLOSED and bool(self.jobs) and self.unsettled
        )

    def notified(self) -> None:
        """A notification for the queue arrived; while in flight it may be for a job
        the claim's snapshot did not see."""
        if self.state in (_State.SENT, _State.DELIVERED):
            self._more = True

    def sent(self) -> None:
        self.state = _State.SENT
        self._more = False
        self._settled.clear()

    def settle(self, state: _State, run: ClaimRun | None, error: StoreError | None = None) -> None:
        if self.state is not _State.CLOSED:
            self.state = state
        if run is not None:
            self.runs.append(run)
        if error is not None:
            self.error = error
        self._settled.set()

    @property
    def unsettled(self) -> bool:
        return not self._settled.is_set()

    async def wait_settled(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        return self._settled.is_set()

    async def close(self, timeout: float = 5.0) -> list[ClaimRun]:
        if not await self.wait_settled(timeout):
            log.warning("kiln claimer: a claim on queue %r did not settle in %ss; its "
                        "jobs' writes wait for it", self.queue, timeout)
        self.state = _State.CLOSED
        self._claimer.forget(self)
        if self.error is not None:
            raise self.error
        return self.runs


class _Batch:
    """The claims in flight: BEGIN and one claim per watch, then COMMIT or ROLLBACK."""

    def __init__(self, watches: list[Watch]) -> None:
        self.watches = watches
        self.began = time.monotonic()
        self.expect = 1 + len(watches)  # results still to read: BEGIN, the claims
        self.rows: list[list[JobRow]] = []
        self.ending: bytes | None = None  # COMMIT or ROLLBACK, once sent

    def run(self, claimed: int) -> ClaimRun:
        return ClaimRun(claimed=claimed, duration=time.monotonic() - self.began)


class Claimer:
    """``qualify``: the store's schema qualifier for the claim it prepares, if any."""

    def __init__(self, counter: Counter, qualify: Callable[[str], str] | None = None) -> None:
        self._counter = counter
        self._qualify = qualify
        self._armed: dict[str, list[Watch]] = {}
        self._due: set[str] = set()  # notified queues with armed watches
        self._batch: _Batch | None = None
        self._pgconn: pq.abc.PGconn | None = None
        self._tx: abc.Transformer | None = None

    # pools ----------------------------------------------------------------------------
    def watch(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        on_claimed: ClaimCallback,
    ) -> Watch | None:
        tx = self._tx
        if tx is None or not kinds or limit <= 0:
            return None
        stmt = _jobs.claim_stmt(queue, list(kinds), limit, server_id)
        params = tx.dump_sequence(stmt.params, [PyFormat.TEXT] * len(stmt.params))
        watch = Watch(self, queue, params, on_claimed)
        self._armed.setdefault(queue, []).append(watch)
        return watch

    def forget(self, watch: Watch) -> None:
        watches = self._armed.get(watch.queue)
        if watches is not None and watch in watches:
            watches.remove(watch)
            if not watches:
                del self._armed[watch.queue]

    # the listener's calls ---------------------------------------------------------------
    async def prepare(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """On a new connection, before the listener takes it over: prepare the claim.
        A database without the kiln schema (or that refuses the statement) gets no
        claims on notifications; its pools claim when woken. The watches armed while
        the connection was down claim at once: their notifications may have been lost."""
        try:
            prepare = _jobs.CLAIM_PREPARE
            await conn.execute(prepare if self._qualify is None else self._qualify(prepare))
        except psycopg.ProgrammingError as exc:
            log.info("kiln claimer: cannot prepare the claim (%s); pools claim when woken",
                     str(exc).strip())
            return
        self._pgconn, self._tx = conn.pgconn, Transformer(conn)
        self._due.update(self._armed)

    def notified(self, queue: str) -> None:
        watches = self._armed.get(queue)
        if watches:
            for watch in watches:
                watch.notified()
            self._due.add(queue)

    def pump(self) -> None:
        """Send a batch for the notified queues, unless one is in flight."""
        pgconn = self._pgconn
        if self._batch is not None or not self._due or pgconn is None:
            return
        watches = [w for q in self._due for w in self._armed.get(q, ()) if w.active]
        self._due.clear()
        if not watches:
            return
        self._batch = _Batch(watches)
        pgconn.enter_pipeline_mode()
        pgconn.send_query_params(b"BEGIN", None)
        for watch in watches:
            pgconn.send_query_prepared(_NAME, watch.params, result_format=pq.Format.BINARY)
            watch.sent()
        pgconn.send_flush_request()
        self._counter.value += 1 + len(watches)

    def read(self) -> None:
        """Take the results that arrived for the batch in flight."""
        batch, pgconn = self._batch, self._pgconn
        nothing = 0
        while batch is not None and pgconn is not None and batch.expect and not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:  # the end of one statement's results, in a pipeline
                nothing += 1
                if nothing > 1:
                    return
                continue
            nothing = 0
            if result.status not in _OK:
                raise Broken(_message(result))
            batch.expect -= 1
            if result.status == pq.ExecStatus.PIPELINE_SYNC:
                self._end(batch)
                batch = self._batch
            elif batch.ending is None and result.status == pq.ExecStatus.TUPLES_OK:
                batch.rows.append(self._rows(result))
                if batch.expect == 0:
                    self._deliver(batch)

    def lost(self, exc: BaseException) -> None:
        """The connection is gone. A claim whose rows were handed over rolled back if
        the database refused it (``Broken``); if the connection was lost, it may or may
        not have committed. The other watches took nothing and stay armed."""
        self._pgconn, self._tx, batch, self._batch = None, None, self._batch, None
        self._due.clear()
        if batch is None:
            return
        error: StoreError = (
            StoreError("job_claim", f"the claim rolled back: {exc}")
            if isinstance(exc, Broken) else UnreachableError(
                "job_claim", f"the LISTEN connection was lost with a claim's commit: {exc}"
            )
        )
        for watch in batch.watches:
            if watch.delivered:
                watch.settle(_State.SPENT, batch.run(len(watch.jobs)), error)
            else:
                watch.settle(_State.ARMED, None)

    # the batch --------------------------------------------------------------------------
    def _rows(self, result: pq.abc.PGresult) -> list[JobRow]:
        tx = self._tx
        assert tx is not None
        tx.set_pgresult(result)
        return _jobs.claimed(tx.load_rows(0, result.ntuples, tuple))

    def _deliver(self, batch: _Batch) -> None:
        """Every claim's rows are in: start the jobs, then commit. A watch closed
        meanwhile can take nothing, so the whole batch rolls back and the others
        claim again."""
        ending = b"COMMIT"
        if any(w.state is _State.CLOSED for w in batch.watches):
            ending = b"ROLLBACK"
            self._due.update(w.queue for w in batch.watches if w.active)
        else:
            for watch, jobs in zip(batch.watches, batch.rows, strict=True):
                watch.jobs = jobs
                if not jobs:
                    watch.settle(_State.ARMED, batch.run(0))
                    continue
                watch.state = _State.DELIVERED
                try:
                    watch.on_claimed(jobs)
                except Exception:  # a bug in the caller: its jobs must not stay claimed
                    log.exception("kiln claimer: on_claimed failed; rolling the claim back")
                    ending = b"ROLLBACK"
        self._finish(batch, ending)

    def _finish(self, batch: _Batch, ending: bytes) -> None:
        pgconn = self._pgconn
        assert pgconn is not None
        batch.ending, batch.expect = ending, 2
        pgconn.send_query_params(ending, None)
        pgconn.pipeline_sync()
        self._counter.value += 1

    def _end(self, batch: _Batch) -> None:
        pgconn = self._pgconn
        assert pgconn is not None
        pgconn.exit_pipeline_mode()
        self._batch = None
        rolled_back = batch.ending == b"ROLLBACK"
        for watch in batch.watches:
            if watch.state is _State.SENT:  # rolled back for a closed watch: claims again
                watch.settle(_State.ARMED, None)
            elif not watch.delivered:
                watch.settle(watch.state, None)
            elif rolled_back:
                error = StoreError("job_claim", "the claim rolled back: nothing was claimed")
                watch.settle(_State.SPENT, batch.run(0), error)
            else:
                watch.settle(_State.SPENT, batch.run(len(watch.jobs)))
        self.pump()


def _message(result: pq.abc.PGresult) -> str:
    text = result.error_message.decode(errors="replace").strip()
    return text or f"claim result {pq.ExecStatus(result.status).name}"
