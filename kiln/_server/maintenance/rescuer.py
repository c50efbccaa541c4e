"""Rescuer: puts the running jobs of dead servers back in their queues (leader only).

A server silent for dead_after is dead; the rescuer looks every heartbeat_interval, so
its jobs are rescued within one more heartbeat_interval. A new leader waits
dead_after + heartbeat_interval after gaining the lease before its first rescue: the
previous leader may have died just before rescuing, and the servers it had not yet
judged dead need that long to prove it.

The rescued attempt counts toward max_attempts. A job rescued twice in a row waits for
its backoff, so a job that takes down every process running it is not passed from
worker to worker without a pause. Results are written through ``job_results_apply``
and are fenced like any other: a dead server's job that finished after all is left
alone. The attempts of jobs cancelled while running on a dead server end too
(attempt_running cleared), which frees the concurrency slots they held. Owns no SQL
and never touches jobs of live servers.
"""

from __future__ import annotations

import random
import time

from kiln._events import JobRescued
from kiln._model._job import AttemptError, JobResult, JobRow, Outcome
from kiln._model._kinds import Kind
from kiln._model._retry import DEFAULT_BACKOFF, Backoff, backoff_from_json
from kiln._server._config import seconds
from kiln._server._context import ServerContext
from kiln._server._service import PeriodicService

REASON = "rescued: the server running this job stopped sending heartbeats"


def backoff_of(job: JobRow, kind: Kind | None) -> Backoff:
    return backoff_from_json(job.backoff) or (kind.backoff if kind else None) or DEFAULT_BACKOFF


def rescue_result(
    job: JobRow, server_id: str, kind: Kind | None, reason: str = REASON
) -> JobResult:
    """What happens to a running job whose attempt was lost with its server.

    The attempt counts: out of attempts the job fails with ``reason``; otherwise it
    goes straight back to its queue, or after its backoff when this is its second
    rescue in a row (``job.rescues`` counts the rescues since its last real result).
    """
    error = AttemptError(attempt=job.attempt, at=time.time(), error=reason, server_id=server_id)
    if job.attempt >= job.max_attempts:
        outcome, delay = Outcome.FAILED, 0.0
    elif job.rescues >= 1:
        outcome, delay = Outcome.RETRY, backoff_of(job, kind).wait(job.attempt)
    else:
        outcome, delay = Outcome.RETRY, 0.0
    return JobResult(
        job_id=job.id, server_id=server_id, attempt=job.attempt, outcome=outcome,
        run_at_delay=delay, error=error, rescued=True,
    )


class Rescuer(PeriodicService):
    name = "rescuer"

    def __init__(self, ctx: ServerContext) -> None:
        super().__init__(seconds(ctx.config.heartbeat_interval), ctx.events)
        self._ctx = ctx
        self._dead_after = seconds(ctx.config.dead_after)
        self._batch = int(ctx.config.rescue_batch)
        self._full = False
        self.rescued = 0

    @property
    def wait_after_gain(self) -> float:
        return self._dead_after + self.interval

    def _ready_in(self) -> float | None:
        """Seconds until this leader may rescue; None when it is not the leader."""
        since = self._ctx.leader_since()
        if since is None:
            return None
        return since + self.wait_after_gain - time.monotonic()

    def first_delay(self) -> float:
        ready_in = self._ready_in()
        return self.interval if ready_in is None else max(ready_in, 0.0)

    def may_run(self) -> bool:
        ready_in = self._ready_in()
        return ready_in is not None and ready_in <= 0

    def next_delay(self, counts: dict[str, int]) -> float:
        if self._full:  # more candidates are waiting: carry on at once
            return 0.0
        ready_in = self._ready_in()
        if ready_in is not None and ready_in > 0:
            return ready_in
        # jitter only downwards: a dead server's jobs wait at most one heartbeat_interval
        return self.interval * random.uniform(0.9, 1.0)

    async def run_once(self) -> dict[str, int]:
        """Rescue one batch of dead servers' jobs; returns rescued and failed counts."""
        ctx = self._ctx
        candidates = await ctx.store.jobs_rescue_candidates(self._dead_after, self._batch)
        self._full = len(candidates) >= self._batch
        counts = {"rescued": 0, "failed": 0}
        woken: dict[str, int] = {}
        for candidate in candidates:
            job = candidate.job
            result = rescue_result(job, candidate.dead_server_id, ctx.kinds.get(job.kind))
            # one job per write: the event must name exactly the jobs the fence let through
            applied = await ctx.store.job_results_apply([result])
            if applied.applied != 1:
                continue
            counts["failed" if result.outcome is Outcome.FAILED else "rescued"] += 1
            for queue, n in applied.released.items():  # the job itself, when available now
                woken[queue] = woken.get(queue, 0) + n
            ctx.events.emit(
                JobRescued(job=job, dead_server_id=candidate.dead_server_id,
                           outcome=result.outcome)
            )
        # a job cancelled while running on a dead server: its handler is gone with the
        # server, so the concurrency slot its attempt held is free
        ended = await ctx.store.jobs_ending_release(self._dead_after)
        if ended:
            counts["ended"] = ended
        done = counts["rescued"] + counts["failed"]
        self._full = self._full and done > 0  # nothing went through: wait for the next round
        self.rescued += done
        if woken:
            ctx.wake(woken, "rescued")
        return counts
