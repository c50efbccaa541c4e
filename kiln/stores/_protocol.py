"""The Store protocol: every database operation kiln performs, at the domain level.

Core code never writes SQL; it calls these methods. Each store implements them
with one named query per dialect and declares what it can do in ``capabilities``.
The conformance suite in tests/stores runs every method against every store.

Time: every timestamp is taken from the database clock. Durations passed in are
seconds (float).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from kiln._model._adoption import Adoption, WaitingJob
from kiln._model._controls import QueueControls
from kiln._model._job import (
    DEAD_AFTER,
    AdmitResult,
    AuditEntry,
    AuditQuery,
    CancelRequest,
    JobFilter,
    JobResult,
    JobRow,
    JobState,
    KindCount,
    KindDeclaration,
    NewJob,
    PublishedKind,
    RateLimit,
    RescueCandidate,
    RunningJob,
    ServerInfo,
    StateCount,
)
from kiln.stores._filters import ERROR_GROUP_SCAN
from kiln.stores._timings import TimingRow
from kiln.stores._translator import StoreFailure

NotifyCallback = Callable[[str, str], None]  # (channel, payload)
ClaimCallback = Callable[[list[JobRow]], None]  # a watch's claimed rows, before their commit


@dataclasses.dataclass(frozen=True, slots=True)
class Capabilities:
    listen_notify: bool  # the store wakes servers itself (PostgreSQL LISTEN/NOTIFY)
    claim_on_notify: bool  # job_claim_watch claims as notifications arrive (LISTEN connection)


@dataclasses.dataclass(frozen=True, slots=True)
class ReleaseResult:
    released: dict[str, int]  # queue -> jobs made available
    next_at: float | None  # seconds until the next scheduled job is due, if any


@dataclasses.dataclass(frozen=True, slots=True)
class ApplyResult:
    applied: int  # results that matched a running job under the same server and attempt
    released: dict[str, int]  # queue -> dependents made available by completions
    applied_ids: frozenset[int] = frozenset()  # the jobs of the results that applied


@dataclasses.dataclass(frozen=True, slots=True)
class TableSize:
    """How big one kiln table is, from the database's own statistics (no table scan).

    ``rows`` is an estimate (PostgreSQL's planner statistics, InnoDB's TABLE_ROWS,
    SQLite's id span); ``dead_rows`` (PostgreSQL: dead tuples not yet vacuumed) and
    ``free_bytes`` (MariaDB's DATA_FREE, SQLite's free pages) are None where the
    database has no such figure. On SQLite ``bytes`` is the whole database file."""

    table: str
    rows: int
    bytes: int
    dead_rows: int | None = None
    free_bytes: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimRun:
    """One claim a watch ran: how many jobs it took, and how long it took in all."""

    claimed: int
    duration: float  # seconds, from sending the claim to its commit (or its failure)


class ClaimWatch(Protocol):
    """A claim the store runs for an idle pool when a notification for its queue arrives.

    Armed by ``Store.job_claim_watch``. On each notification for the queue the store
    claims up to ``limit`` jobs and, when it took any, hands them to the callback as
    soon as the database returned them, before their commit is confirmed: the jobs
    start without waiting for the commit's WAL flush. The watch is then spent. A claim
    that took nothing leaves it armed."""

    @property
    def active(self) -> bool:
        """True while a notification for the queue makes the store claim for the watch:
        armed, or claiming, and not yet spent or closed."""
        ...

    @property
    def more(self) -> bool:
        """True when a notification arrived while the claim that spent the watch was
        in flight: the queue may hold more jobs than it took."""
        ...

    @property
    def unsettled(self) -> bool:
        """True while the commit of a claim whose rows the callback took is unknown."""
        ...

    async def wait_settled(self, timeout: float) -> bool:
        """Wait (up to ``timeout``) until no commit is unknown; True once settled. After
        ``close`` timed out this still follows the claim, and ``close`` raising (or not)
        is replaced by ``error``."""
        ...

    @property
    def error(self) -> Exception | None:
        """Why the claim whose rows the callback took failed, once settled (see close)."""
        ...

    async def close(self, timeout: float = 5.0) -> list[ClaimRun]:
        """Disarm; wait (up to ``timeout``) for a claim in flight; return the claims
        run. Once it returns the callback is never called. Raises ``StoreError`` when the
        commit of a claim whose rows the callback took failed: ``UnreachableError`` when
        the connection was lost with it (the claim may or may not have taken), another
        ``StoreError`` when it rolled back."""
        ...


@runtime_checkable
class Store(Protocol):
    """A job store. Methods named noun_verb; all of them async unless they end in _sync."""

    capabilities: Capabilities
    url: str

    # lifecycle
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def migrate(self) -> list[int]:
        """Apply missing migrations; return the versions applied."""
    async def schema_check(self) -> None:
        """Raise NotMigratedError unless the schema is at this kiln's version."""
    async def schema_version(self) -> int:
        """The highest migration applied; 0 on a database kiln never migrated."""
    async def now(self) -> datetime: ...
    def failures(self) -> list[StoreFailure]:
        """The operations whose latest call failed (since when, the latest error),
        from memory: what ``Server.healthy()`` reads to say the store is failing."""
        ...

    # notifications (stores with listen_notify; others are woken through a Bus)
    async def listen(self, callback: NotifyCallback) -> None: ...
    def listening(self) -> bool: ...
    def connections(self) -> int:
        """The database connections this store holds open now (its pool's, its LISTEN
        connection, its sync connections), from memory: what a server reports."""

    # jobs: insert and claim
    async def job_insert_many(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]: ...
    def job_insert_many_sync(self, jobs: Sequence[NewJob], conn: Any = None) -> list[int]: ...
    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        limited: bool = False, keys: bool = True,
    ) -> list[JobRow]:
        """Claim up to ``limit`` available jobs. ``limited``: the queue may hold jobs with
        a concurrency key or have a limit of its own (kiln._model._concurrency): claim those
        too, each under its key's lock; without it only plain jobs of unlimited queues
        are claimed. ``keys`` False (with ``limited``): no kind the claim asks for has a
        limit of its own, so only the queue's limit counts and jobs with a concurrency
        key are left alone, as the plain claim leaves them; a store may then skip the
        work per key."""
        ...
    def job_claim_watch(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str,
        on_claimed: ClaimCallback,
    ) -> ClaimWatch | None:
        """Arm a ClaimWatch that claims like ``job_claim`` when a notification for
        ``queue`` arrives; None when the store cannot (no ``claim_on_notify``, or its
        LISTEN connection is down). ``on_claimed`` must not raise."""
        ...

    async def concurrency_declare(
        self, limits: Mapping[str, int], server_id: str | None = None
    ) -> None:
        """Set the max of these keys ("queue:NAME" for a queue's limit). With
        ``server_id``: that server declares them, and a queue's limit lasts while a live
        server declares it (``concurrency_sweep``)."""
    async def concurrency_sweep(self, dead_after: float) -> list[str]:
        """Remove the queue limits ("queue:NAME") that no server with a heartbeat in the
        last ``dead_after`` seconds declares (a limit declared by a kiln older than the
        declarations table stays until declared again or removed), set the others to
        their newest live declaration's max; returns the keys removed."""
    async def concurrency_keys_prune(self, idle_for: float, limit: int) -> int:
        """Delete up to ``limit`` rows of concurrency keys (not queue limits) that no job
        needs (none waiting, running or still ending) and that no claim took a job of
        for ``idle_for`` seconds; a row another transaction holds (an enqueue putting a
        job under the key) is left. Returns how many."""
        ...
    async def concurrency_remove(self, key: str, actor: str) -> tuple[int | None, list[str]]:
        """Remove the limit ``key`` and its declarations, audited as ``actor``, in one
        transaction; returns the max it had (None: no such limit) and the ids of the
        servers that had declared it ("" for a kiln older than the declarations)."""
    async def concurrency_in_use(self) -> dict[str, int]:
        """Running jobs by key group ("kind:NAME", "queue:NAME"), in one grouped read."""

    # a kind's declaration applied to the jobs that wait (kiln._model._adoption); every
    # write leaves a job that is no longer waiting (awaiting, pending, scheduled,
    # available) as it is
    async def jobs_unkey(self, kinds: Sequence[str]) -> dict[str, int]:
        """Clear the concurrency key of the available jobs of ``kinds`` (their limit was
        removed): plain jobs from then on. Returns queue -> jobs cleared."""
    async def concurrency_resize(self, limits: Mapping[str, int]) -> int:
        """Give every key row of each kind (kind -> max) that max; returns the rows
        changed (a row that holds it already is not written)."""
    async def jobs_waiting(self, kind: str, after_id: int, limit: int) -> list[WaitingJob]:
        """Up to ``limit`` waiting jobs of ``kind`` that are not unique, with ids above
        ``after_id``, in id order (a walk over the jobs table, for a rare rekey)."""
    async def jobs_undeclared(self, kinds: Sequence[str], limit: int) -> list[WaitingJob]:
        """Up to ``limit`` waiting jobs of ``kinds`` enqueued without a declaration
        (``defaulted`` bits set), oldest first: an index holds only those."""
    async def jobs_rekey(self, keys: Mapping[int, str], maxes: Mapping[str, int],
                         running_on: str | None = None) -> int:
        """Set the concurrency key of each job id that still waits (or, with
        ``running_on``, that runs under that server id: a job it claimed under a key its
        declaration no longer gives, which it hands back), after declaring the keys'
        rows (key -> max) as an insert does; returns the jobs changed."""
    async def jobs_adopt(self, adoption: Adoption) -> dict[str, int]:
        """Give the jobs of ``adoption`` that still wait with ``defaulted`` bits the
        declaration's value of each option whose bit they have, and clear the bits: one
        transaction. Returns queue -> those of them available there now."""

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult: ...
    async def job_param_set(
        self, job_id: int, server_id: str, attempt: int, name: str, value: Any
    ) -> bool: ...
    async def jobs_release_due(self) -> ReleaseResult: ...

    # jobs: admin
    async def job_get(self, job_id: int) -> JobRow | None: ...
    async def job_list(
        self, filter: JobFilter, limit: int = 50, before_id: int | None = None,
        after_id: int | None = None, *, brief: bool = False,
    ) -> list[JobRow]:
        """Jobs matching ``filter``, newest first below ``before_id``; or, given
        ``after_id``, oldest first above it (keyset pages either way). ``brief``: a
        JSON value over 4 KiB as text is left out, named in ``JobRow.cut`` (args, params
        and metadata read None, errors the last record without its traceback), so a
        page of jobs with megabytes of args is not megabytes read."""
    async def job_ids(
        self, filter: JobFilter, limit: int, before_id: int | None = None
    ) -> list[int]:
        """The ids of ``job_list(filter, limit, before_id)``, newest first, without
        reading the rows (the pages of a bulk action, kiln._client._bulk)."""
        ...
    async def job_count(self, filter: JobFilter) -> int: ...
    async def job_id_sums(self, filter: JobFilter) -> tuple[int, int, int, int, int]:
        """The count of the jobs matching ``filter``, their largest id, and the sums of
        their ids that kiln._model._idset fingerprints (one aggregate: no id is read
        out)."""
        ...
    async def jobs_requeue(self, filter: JobFilter, dead_after: float = DEAD_AFTER) -> int:
        """Back to the queue with a full retry budget; returns how many. A job cancelled
        while running stays cancelled until that attempt ended (its server's result,
        fenced off, arrived) or its server is dead (no heartbeat for ``dead_after``
        seconds, or deregistered): its handler may still be running."""
        ...
    async def jobs_make_due(self, filter: JobFilter) -> int:
        """Make matching scheduled and pending jobs due now: a run_at in the future becomes
        the database's now; attempts, errors and params stay. The next release (or
        admission) makes them available as any due job; returns how many (kiln.testing's
        ``drain(with_scheduled=True)``)."""
        ...
    async def jobs_admit_lifted(self, filter: JobFilter, retries_only: bool = False) -> int:
        """Make matching pending jobs available now, their rate limits lifted (no token
        taken; the admission is recorded); ``retries_only``: only those that ran before
        (attempt > 0). kiln.testing's drain: retries of rate-limited jobs run under
        ``with_scheduled``, a backlog under ``lift_rate_limits``. Returns how many."""
        ...
    async def jobs_cancel(self, filter: JobFilter, actor: str | None = None) -> int:
        """Cancel the matching unfinished jobs; returns how many. A running job is marked
        cancelled at once (its server's late result is fenced off, and the job uses no
        more attempts); its attempt counts as running until that result arrives. With
        ``actor``, each job's errors get a record "Cancelled by <actor>". When a running
        job was among them, a store with ``listen_notify`` sends ``CANCEL_PAYLOAD`` (see
        kiln._client._bus) so that its server stops the handler at once."""
        ...
    async def jobs_cancel_requested(self, job_ids: Sequence[int]) -> list[CancelRequest]:
        """Of ``job_ids`` (the jobs a server runs), those cancelled whose attempt has not
        ended yet, with the seconds since the cancel by the database clock: one read by
        primary key, which the server makes on a cancel notification and, while it runs
        jobs, once per heartbeat_interval."""
        ...
    async def jobs_delete(self, filter: JobFilter) -> int: ...
    async def job_dependents(self, job_id: int) -> list[int]: ...
    async def job_dependency_results(self, job_id: int) -> dict[int, Any]:
        """The stored results of the jobs ``job_id`` depends on, by dependency id in id
        order: None for one without a result; a deleted dependency is absent."""
    async def job_counts(
        self, states: Sequence[JobState] | None = None, *, cap: int | None = None
    ) -> list[StateCount]:
        """Jobs by queue and state, for every state, or only for ``states``. A subset is
        counted through each state's index, so the live states (awaiting, pending,
        scheduled, available, running, failed) cost what those jobs cost, however many
        completed and cancelled ones the table keeps. With ``cap`` a store may count each
        queue and state exactly up to ``cap`` jobs only and estimate above it (marked
        ``estimated``), so the read costs what the cap allows, not what the table holds
        (every store does: PostgreSQL from a sample of pages, MariaDB and SQLite from a
        sample of ids, kiln.stores._sample)."""
    async def queue_oldest_available(self) -> dict[str, float]: ...
    async def queue_scheduled_due(self) -> dict[str, int]:
        """Per queue, the scheduled jobs whose run_at has come by the database clock and
        that the releaser has not made available yet (through the scheduled jobs' run_at
        index: only the due ones are read)."""
    async def job_throughput(self, since_seconds: float) -> dict[str, int]: ...
    async def job_counts_by_kind(self) -> list[tuple[str, JobState, int]]:
        """(kind, state, jobs) for every kind and state that has jobs (one GROUP BY)."""
    async def job_kind_counts(self, cap: int) -> list[KindCount]:
        """Jobs by kind and state, for the dashboard: as ``job_counts_by_kind``, but a
        store may count each state exactly up to ``cap`` jobs only and estimate its
        kinds above it (marked ``estimated``), so the read costs what the cap allows
        (PostgreSQL per state; MariaDB and SQLite per kind and state, up to
        kiln.stores._capped.PAIR_CAP)."""
    async def jobs_available_by_kind(self, cap: int | None = None) -> list[tuple[str, str, int]]:
        """(queue, kind, jobs) of the available jobs, for every pair that has some (one
        GROUP BY; a read as costly as job_counts, made as rarely). With ``cap``, as
        job_counts: PostgreSQL counts each pair exactly up to ``cap`` and estimates
        above it (never below ``cap + 1``); MariaDB and SQLite each kind's jobs up to
        ``cap``, spreading a kind above it over its queues by their estimates."""
    async def job_error_groups(
        self, filter: JobFilter, limit: int, scan: int = ERROR_GROUP_SCAN
    ) -> list[tuple[str, int, int]]:
        """(last error message, jobs, highest id) of the failed jobs under ``filter``,
        grouped by their last attempt's error message, the most common first, at most
        ``limit`` groups: of the newest ``scan`` failed jobs only, so the read stays
        bounded however many failed (``JobFilter(last_error=...)`` selects a group)."""
        ...

    async def job_timings(
        self, since_seconds: float, bucket_seconds: float, by: str
    ) -> list[TimingRow]:
        """The completed and failed jobs of the last ``since_seconds`` (database clock)
        grouped by ``by`` ("queue" or "kind"), bucket (as ``job_finished_series``),
        state and run-time and wait-time class (kiln._model._timings): one GROUP BY,
        at most MAX_TIMING_ROWS rows."""
        ...

    async def job_finished_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[int, str, int]]:
        """(bucket, state, jobs) of the jobs that finished (completed, failed, cancelled)
        in the last ``since_seconds // bucket_seconds`` buckets, by the database clock:
        buckets on the epoch's multiples of ``bucket_seconds``, 0 the current one, 1 the
        one before, and so on. Buckets without jobs are absent. Read from the timings
        rollup before its watermark (kiln._model._rollup.finished_bounds), so the cost
        does not grow with the jobs finished in the span."""
    async def queue_completed_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[str, int, int]]:
        """(queue, bucket, jobs) of the jobs completed in the last ``since_seconds``,
        bucketed as ``job_finished_series`` does: one GROUP BY for every queue."""
    async def queue_running_counts(self) -> list[tuple[str, str, int]]:
        """(queue, server_id, jobs) of the running jobs: one GROUP BY over the running
        jobs' index ("" for a running job without a server)."""

    # servers, leader, rescue, sweep, prune
    async def server_register(self, info: ServerInfo) -> None: ...
    async def server_heartbeat(self, server_id: str, connections: int | None = None) -> bool:
        """Report alive, and the database connections its process holds now (None:
        leave them as they were); False when the registration is gone (the server must
        rejoin)."""
    async def server_deregister(self, server_id: str) -> None: ...
    async def server_list(self) -> list[ServerInfo]: ...
    async def leader_elect(self, server_id: str, ttl: float) -> bool:
        """Take or renew the lease; True while this server holds it."""
    async def leader_resign(self, server_id: str) -> None: ...
    async def leader_get(self) -> str | None: ...
    async def installation_get(self) -> str | None:
        """The id of this kiln installation (one database, or one schema of it), made at
        random by migration 12; None before it."""
    async def jobs_rescue_candidates(
        self, dead_after: float, limit: int
    ) -> list[RescueCandidate]: ...
    async def jobs_running_on(
        self, server_id: str, older_than: float, limit: int
    ) -> list[RunningJob]:
        """Jobs running under ``server_id`` whose attempt began more than ``older_than``
        seconds ago (database clock), in id order, at most ``limit``: one indexed read."""
        ...
    async def jobs_ending_release(self, dead_after: float) -> int:
        """End the attempts of jobs cancelled while running (attempt_running) on servers
        silent for ``dead_after``: their concurrency slots are free. Returns how many."""
        ...
    async def servers_sweep(self, dead_for: float) -> int: ...
    async def jobs_prune(self, state: JobState, older_than: float, limit: int) -> int:
        """Delete up to ``limit`` jobs of a finished ``state`` older than ``older_than``;
        their dependents are released as ``jobs_delete`` releases them."""
    async def timings_roll(self) -> tuple[int, bool]:
        """Add the completed and failed jobs of the next window to the timings rollup
        and move its watermark past them, in one transaction (kiln._model._rollup):
        returns (jobs counted, whether the rollup is now caught up)."""
    async def timings_rolled_to(self) -> int | None:
        """The rollup's watermark (unix seconds; None: never rolled)."""
    async def jobs_release_stranded(self, limit: int) -> dict[str, int]:
        """Release up to ``limit`` awaiting jobs none of whose dependencies is unfinished
        (each completed or no longer there), which nothing else would release; returns
        queue -> jobs released (to available, scheduled or pending as their options say)."""

    # published kind declarations
    async def kinds_publish(
        self, server_id: str, host: str, pid: int, kinds: Sequence[KindDeclaration]
    ) -> None:
        """Record (or renew) this server's declaration of each kind, timestamped by the
        database clock; drop the kinds' rows of servers no longer registered."""
    async def kind_declarations(self) -> list[KindDeclaration]:
        """The declaration in use of every published kind (one per kind): the newest a
        registered server published, else the newest."""
    def kind_declarations_sync(self) -> list[KindDeclaration]: ...
    async def kinds_list(self) -> list[PublishedKind]:
        """Every server's declaration, by kind, newest first."""
    async def kind_conflicts(self) -> int:
        """Kinds whose live servers publish more than one distinct declaration."""

    # table size
    async def table_sizes(self) -> list[TableSize]:
        """The size of the jobs table (kiln_jobs) from catalog statistics: cheap, never
        a scan, so an exporter may read it every minute."""

    # rate limits
    async def rate_limit_declare(self, key: str, limit: RateLimit) -> None: ...
    async def rate_keys_pending(self) -> list[str]: ...
    async def jobs_admit(
        self, key: str, max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> AdmitResult:
        """Admit what ``key``'s limit allows now, of its pending jobs in ``queues`` (None:
        every queue): the admitter leaves out paused queues and queues no live server
        serves, so that nothing is admitted that cannot start. ``ahead`` (seconds): also
        admit the jobs the limit allows within that time from now, each at its own time
        (``scheduled`` until then; kiln.stores._admission)."""
        ...
    async def jobs_admit_keys(
        self, keys: Sequence[str], max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> dict[str, AdmitResult]:
        """``jobs_admit`` for several keys in one transaction (a few round trips for all
        of them); a key another transaction holds is skipped (``busy``). An error fails
        every key of the call: the caller admits them one by one to find the bad one."""
        ...
    async def rate_keys_prune(self, idle_for: float, keep: Sequence[str], limit: int) -> int:
        """Delete up to ``limit`` rows of rate keys no unfinished job uses, idle (no
        admission, no declaration) for ``idle_for`` seconds plus one window and one full
        refill of their bucket, except the keys in ``keep``; a row another transaction
        holds is left. Returns how many."""
        ...
    async def rate_limit_list(self) -> list[tuple[str, RateLimit, int]]: ...
    async def rate_keys_backlog(
        self, limit: int, *, cap: int | None = None
    ) -> list[tuple[str, RateLimit | None, int]]:
        """Up to ``limit`` keys with the most pending jobs that are due (run_at passed),
        most first (then by key): (key, its limit or None if undeclared, those jobs).
        One grouped read of the pending jobs (what kilnotel's per-key gauges show).
        With ``cap`` a store may count each key exactly up to ``cap`` jobs only and
        estimate above it, so the read costs what the keys and the cap allow, not what
        the backlog holds (every store does: kiln.stores._capped)."""

    # recurring jobs
    async def cron_enqueue(self, name: str, slot: datetime, job: NewJob) -> int | None:
        """Insert ``job`` unless slot ``slot`` of ``name`` was already enqueued."""
    async def cron_last_slot(self, name: str) -> datetime | None: ...

    # audit
    async def audit_record(
        self, actor: str, action: str, count: int, detail: dict[str, Any]
    ) -> None: ...
    async def audit_list(
        self, limit: int = 50, query: AuditQuery | None = None
    ) -> list[AuditEntry]:
        """The newest ``limit`` entries ``query`` matches (kiln._model._job.AuditQuery)."""
        ...

    # queue controls (kiln._model._controls): each change is one transaction with its audit row
    async def queue_pause(self, queue: str, actor: str) -> bool:
        """Pause ``queue`` ("*": every queue); claims skip a paused queue's jobs from
        the commit on. False when it was paused already (nothing changed)."""
        ...
    async def queue_resume(self, queue: str, actor: str) -> int:
        """Lift the pause of ``queue`` ("*": every pause); returns how many were lifted."""
        ...
    async def queue_limit_set(
        self, queue: str, server_id: str, concurrency: int | None, actor: str
    ) -> None:
        """Set the concurrency of ``queue`` for ``server_id`` ("" for every server of
        the queue); None removes that limit (back to the configured value)."""
        ...
    async def queue_controls(self) -> QueueControls:
        """Every pause and limit: one cheap read (servers poll it)."""
        ...

    # query accounting for the idle-cost measurement
    def query_count(self) -> int: ...


