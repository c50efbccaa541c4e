"""Pruner: deletes finished jobs older than their state's retention (leader only).

Retentions come from ServerConfig: prune_completed_after, prune_cancelled_after and
prune_failed_after (None keeps a state forever; failed jobs are kept by default until
someone requeues or deletes them). Each store call deletes at most prune_batch jobs in
its own short transaction, so pruning never holds long locks; a pass loops until a
batch comes back short, up to MAX_BATCHES, and the next pass follows at once when
that cap was hit. After each full batch it rests REST times as long as the batch
took, so a backlog (a retention shortened, a leader back after an outage) is
deleted with about a seventh of one connection's time instead of all of it. Measured
with ``bench/bench_scale.py`` on PostgreSQL (1,000,000 finished jobs, 1,000 jobs/s
flowing through one worker): at full speed the pruner deleted 66,000 rows/s and
raised the pickup p99 from 7.7 ms to 109 ms; resting 3 times as long, 15,900 rows/s
and 17 ms against 6.6; resting 6 times as long, 9,100 rows/s (nine times that inflow)
and 12.5 ms against 7.5.

The rest must not let the table grow without bound where deletes are slower
(MariaDB's secondary indexes, SQLite's single writer, a loaded host): a pruner that
stays behind, every pass stopped by MAX_BATCHES, for longer than BEHIND_GRACE halves
its rest with each further minute behind, down to none; the first pass that ends on
a short batch (nothing older than the retention is left) brings the full rest back.
A backlog PostgreSQL clears in a few minutes never reaches the grace, so claims keep
the protection; a pruner that would otherwise fall behind forever catches up.
Each pass also deletes the rows of rate keys (kiln_rate_limits) that no unfinished
job uses and that were idle for KEY_IDLE plus a window and a full refill of their
bucket, keeping the keys kinds declare: per-tenant keys (RateLimit(key=...), or a
rate_key per job) come and go without leaving rows behind. And the rows of
concurrency keys (kiln_concurrency_keys: Concurrency(key="args.tenant")) that no job
needs (none waiting, running or still ending) and that no claim took a job of for
KEY_IDLE: every limited claim probes every such row (Store.concurrency_keys_prune;
the race with an enqueue of the key is closed by row locks, see the stores). Owns no
SQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from kiln._model._job import JobState
from kiln._server._config import seconds
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

MAX_BATCHES = 20  # per state and pass: keeps one pass bounded
REST = 6.0  # after a full batch, rest this many times as long as it took
BEHIND_GRACE = 300.0  # seconds behind before the rest shrinks
MIN_REST = 0.1  # a rest factor below this is none
KEY_IDLE = 3600.0  # a rate (plus its window) or concurrency key unused this long loses its row

log = logging.getLogger("kiln.pruner")


def rest_factor(behind_for: float | None) -> float:
    """How many times a full batch's time to rest, ``behind_for`` seconds into a
    backlog (None: not behind): REST within the grace, then halved each minute."""
    if behind_for is None or behind_for < BEHIND_GRACE:
        return REST
    factor = REST * 0.5 ** (int((behind_for - BEHIND_GRACE) // 60) + 1)
    return factor if factor >= MIN_REST else 0.0


class Pruner(PeriodicService):
    name = "pruner"

    def __init__(self, ctx: ServerContext, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        super().__init__(seconds(ctx.config.prune_interval), ctx.events)
        self._clock = clock
        cfg = ctx.config
        self._ctx = ctx
        self._batch = int(cfg.prune_batch)
        self.retention: dict[JobState, float] = {
            state: seconds(after)
            for state, after in (
                (JobState.COMPLETED, cfg.prune_completed_after),
                (JobState.CANCELLED, cfg.prune_cancelled_after),
                (JobState.FAILED, cfg.prune_failed_after),
            )
            if after is not None
        }
        self._more = False
        self.key_idle = KEY_IDLE  # seconds a key's row outlives its last use
        self.behind_since: float | None = None  # clock time the backlog began
        self._said = REST  # the rest factor last logged
        self.pruned = 0

    def first_delay(self) -> float:
        return 0.0

    def next_delay(self, counts: dict[str, int]) -> float:
        return 0.0 if self._more else super().next_delay(counts)

    async def run_once(self) -> dict[str, int]:
        """Prune every state with a retention; returns the jobs deleted per state."""
        counts: dict[str, int] = {}
        self._more = False
        rest = self.rest()
        for state, older_than in self.retention.items():
            deleted = 0
            for _ in range(MAX_BATCHES):
                began = time.monotonic()
                n = await self._ctx.store.jobs_prune(state, older_than, self._batch)
                deleted += n
                if n < self._batch:
                    break
                await asyncio.sleep((time.monotonic() - began) * rest)
            else:
                self._more = True
            counts[state.value] = deleted
            self.pruned += deleted
        self._track_backlog()
        keys = await self._prune_rate_keys()
        if keys:
            counts["rate_keys"] = keys
        conc = await self._prune_concurrency_keys()
        if conc:
            counts["concurrency_keys"] = conc
        return counts

    async def _prune_concurrency_keys(self) -> int:
        """The rows of concurrency keys no job needs and not claimed from for
        KEY_IDLE; a key enqueued again gets its row back (with its max) at once."""
        pruned = 0
        for _ in range(MAX_BATCHES):
            n = await self._ctx.store.concurrency_keys_prune(self.key_idle, self._batch)
            pruned += n
            if n < self._batch:
                break
        return pruned

    async def _prune_rate_keys(self) -> int:
        """The rows of rate keys no unfinished job uses and idle for KEY_IDLE (plus a
        window and a full refill of their bucket): per-tenant keys come and go, their
        rows should not stay. The keys kinds declare (this server's, and every
        published declaration's) stay: a producer that does not know the limit relies
        on them."""
        store = self._ctx.store
        keep = {k.rate_key or k.name for k in self._ctx.kinds.values() if k.rate_limit}
        for declared in await store.kind_declarations():
            options = declared.options
            if options.get("rate_limit") is not None:
                keep.add(str(options.get("rate_key") or declared.kind))
        pruned = 0
        for _ in range(MAX_BATCHES):
            n = await store.rate_keys_prune(self.key_idle, sorted(keep), self._batch)
            pruned += n
            if n < self._batch:
                break
        return pruned

    def rest(self) -> float:
        """The rest factor of the next pass (see the module's docstring)."""
        since = self.behind_since
        return rest_factor(None if since is None else self._clock() - since)

    def _track_backlog(self) -> None:
        if not self._more:
            self.behind_since = None
        elif self.behind_since is None:
            self.behind_since = self._clock()
        rest = self.rest()
        if rest != self._said:
            self._said = rest
            if rest < REST:
                log.warning("pruner behind its backlog for %.0f s: resting %.2fx a full"
                            " batch's time instead of %sx", self._clock() - (
                                self.behind_since or 0.0), rest, REST)
            else:
                log.info("pruner caught up with its backlog; resting %sx again", REST)
