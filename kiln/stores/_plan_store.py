"""The Store operations that a plan-running store (PostgreSQL, MySQL) writes the same
way: call the dialect's statement of the same name, as a read or as a write.

A dialect gives its statement modules in a ``PlanSql`` and two ways to run a plan
(``_read``, ``_write``); ``PlanStore`` holds the forwarding methods once. The
protocols below name every statement function such a store calls, so mypy checks
that each dialect's module has it with the same parameters and row types: the names
match across dialects because the type checker says so.

What a dialect does its own way (insert, claim, results, release, cron, the clock,
the sync path, the concurrency limits) stays in its ``_store``, and so does anything
a dialect adds around a statement (MySQL's claim hints): it overrides the method and
calls ``super()``. SQLite's statements are functions of a connection rather than
plans, so its store keeps its own forwarding methods.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from kiln._model._controls import QueueControls
from kiln._model._job import (
    DEAD_AFTER,
    AdmitResult,
    AuditEntry,
    AuditQuery,
    CancelRequest,
    JobFilter,
    JobRow,
    JobState,
    KindCount,
    KindDeclaration,
    PublishedKind,
    RateLimit,
    RescueCandidate,
    RunningJob,
    ServerInfo,
    StateCount,
)
from kiln.stores import _migrations
from kiln.stores._filters import ERROR_GROUP_SCAN
from kiln.stores._protocol import TableSize
from kiln.stores._timings import TimingRow
from kiln.stores._translator import StoreFailure, Translator

S = TypeVar("S")  # a dialect's step
A = TypeVar("A")  # what a dialect's step answers
T = TypeVar("T")
S_co = TypeVar("S_co", covariant=True)
A_contra = TypeVar("A_contra", contravariant=True)

# a plan of a dialect whose steps are S, answered with A, returning T
Plan = Generator[S, A, T]


class SchemaSql(Protocol[S_co, A_contra]):
    def latest(self) -> int: ...
    def version(self) -> Generator[S_co, A_contra, int]: ...


class JobsSql(Protocol[S_co, A_contra]):
    def param_set(
        self, job_id: int, server_id: str, attempt: int, name: str, value: Any
    ) -> Generator[S_co, A_contra, bool]: ...


class AdminSql(Protocol[S_co, A_contra]):
    def get(self, job_id: int) -> Generator[S_co, A_contra, JobRow | None]: ...
    def list_jobs(
        self, f: JobFilter, limit: int, before_id: int | None, after_id: int | None = None,
        brief: bool = False,
    ) -> Generator[S_co, A_contra, list[JobRow]]: ...
    def list_ids(
        self, f: JobFilter, limit: int, before_id: int | None
    ) -> Generator[S_co, A_contra, list[int]]: ...
    def count(self, f: JobFilter) -> Generator[S_co, A_contra, int]: ...
    def id_sums(
        self, f: JobFilter
    ) -> Generator[S_co, A_contra, tuple[int, int, int, int, int]]: ...
    def requeue(self, f: JobFilter, dead_after: float) -> Generator[S_co, A_contra, int]: ...
    def make_due(self, f: JobFilter) -> Generator[S_co, A_contra, int]: ...
    def admit_lifted(
        self, f: JobFilter, retries_only: bool
    ) -> Generator[S_co, A_contra, int]: ...
    def delete(self, f: JobFilter) -> Generator[S_co, A_contra, int]: ...
    def dependents(self, job_id: int) -> Generator[S_co, A_contra, list[int]]: ...
    def dependency_results(self, job_id: int) -> Generator[S_co, A_contra, dict[int, Any]]: ...
    def state_counts(
        self, states: Sequence[JobState] | None = None, cap: int | None = None
    ) -> Generator[S_co, A_contra, list[StateCount]]: ...
    def oldest_available(self) -> Generator[S_co, A_contra, dict[str, float]]: ...
    def scheduled_due(self) -> Generator[S_co, A_contra, dict[str, int]]: ...
    def throughput(self, since: float) -> Generator[S_co, A_contra, dict[str, int]]: ...
    def counts_by_kind(self) -> Generator[S_co, A_contra, list[tuple[str, JobState, int]]]: ...
    def kind_counts(self, cap: int) -> Generator[S_co, A_contra, list[KindCount]]: ...
    def available_by_kind(
        self, cap: int | None = None
    ) -> Generator[S_co, A_contra, list[tuple[str, str, int]]]: ...
    def finished_series(
        self, since: float, bucket: float
    ) -> Generator[S_co, A_contra, list[tuple[int, str, int]]]: ...
    def completed_series_by_queue(
        self, since: float, bucket: float
    ) -> Generator[S_co, A_contra, list[tuple[str, int, int]]]: ...
    def running_by_server(self) -> Generator[S_co, A_contra, list[tuple[str, str, int]]]: ...
    def error_groups(
        self, f: JobFilter, limit: int, scan: int
    ) -> Generator[S_co, A_contra, list[tuple[str, int, int]]]: ...
    def timings(
        self, since: float, bucket: float, by: str
    ) -> Generator[S_co, A_contra, list[TimingRow]]: ...


class CancelSql(Protocol[S_co, A_contra]):
    def cancel(self, f: JobFilter, actor: str | None) -> Generator[S_co, A_contra, int]: ...
    def cancel_requested(
        self, job_ids: Sequence[int]
    ) -> Generator[S_co, A_contra, list[CancelRequest]]: ...


class ClusterSql(Protocol[S_co, A_contra]):
    def server_register(self, info: ServerInfo) -> Generator[S_co, A_contra, None]: ...
    def server_heartbeat(
        self, server_id: str, connections: int | None
    ) -> Generator[S_co, A_contra, bool]: ...
    def server_deregister(self, server_id: str) -> Generator[S_co, A_contra, None]: ...
    def server_list(self) -> Generator[S_co, A_contra, list[ServerInfo]]: ...
    def leader_elect(self, server_id: str, ttl: float) -> Generator[S_co, A_contra, bool]: ...
    def leader_resign(self, server_id: str) -> Generator[S_co, A_contra, None]: ...
    def leader_get(self) -> Generator[S_co, A_contra, str | None]: ...
    def installation_get(self) -> Generator[S_co, A_contra, str | None]: ...
    def rescue_candidates(
        self, dead_after: float, limit: int
    ) -> Generator[S_co, A_contra, list[RescueCandidate]]: ...
    def running_on(
        self, server_id: str, older_than: float, limit: int
    ) -> Generator[S_co, A_contra, list[RunningJob]]: ...
    def ending_dead(self, dead_after: float) -> Generator[S_co, A_contra, int]: ...
    def sweep(self, dead_for: float) -> Generator[S_co, A_contra, int]: ...
    def prune(
        self, state: JobState, older_than: float, limit: int
    ) -> Generator[S_co, A_contra, int]: ...
    def release_stranded(self, limit: int) -> Generator[S_co, A_contra, dict[str, int]]: ...
    def timings_roll(self) -> Generator[S_co, A_contra, tuple[int, bool]]: ...
    def timings_rolled_to(self) -> Generator[S_co, A_contra, int | None]: ...
    def cron_last_slot(self, name: str) -> Generator[S_co, A_contra, datetime | None]: ...
    def audit_record(
        self, actor: str, action: str, n: int, detail: dict[str, Any]
    ) -> Generator[S_co, A_contra, None]: ...
    def audit_list(
        self, limit: int, query: AuditQuery
    ) -> Generator[S_co, A_contra, list[AuditEntry]]: ...


class RatesSql(Protocol[S_co, A_contra]):
    def rate_limit_declare(self, key: str, limit: RateLimit) -> Generator[S_co, A_contra, None]: ...
    def rate_keys_pending(self) -> Generator[S_co, A_contra, list[str]]: ...
    def admit(
        self, key: str, max_batch: int, queues: list[str] | None = None, ahead: float = 0.0
    ) -> Generator[S_co, A_contra, AdmitResult]: ...
    def admit_keys(
        self, keys: list[str], max_batch: int, queues: list[str] | None = None,
        ahead: float = 0.0,
    ) -> Generator[S_co, A_contra, dict[str, AdmitResult]]: ...
    def rate_keys_prune(
        self, idle_for: float, keep: list[str], limit: int
    ) -> Generator[S_co, A_contra, int]: ...
    def rate_limit_list(self) -> Generator[S_co, A_contra, list[tuple[str, RateLimit, int]]]: ...
    def rate_keys_backlog(
        self, limit: int, cap: int | None = None
    ) -> Generator[S_co, A_contra, list[tuple[str, RateLimit | None, int]]]: ...


class KindsSql(Protocol[S_co, A_contra]):
    def publish(
        self, server_id: str, host: str, pid: int, kinds: Sequence[KindDeclaration]
    ) -> Generator[S_co, A_contra, None]: ...
    def newest(self) -> Generator[S_co, A_contra, list[KindDeclaration]]: ...
    def listed(self) -> Generator[S_co, A_contra, list[PublishedKind]]: ...
    def conflicts(self) -> Generator[S_co, A_contra, int]: ...


class ControlsSql(Protocol[S_co, A_contra]):
    def pause(self, queue: str, actor: str) -> Generator[S_co, A_contra, bool]: ...
    def resume(self, queue: str, actor: str) -> Generator[S_co, A_contra, int]: ...
    def limit_set(
        self, queue: str, server_id: str, concurrency: int | None, actor: str
    ) -> Generator[S_co, A_contra, None]: ...
    def controls(self) -> Generator[S_co, A_contra, QueueControls]: ...


class SizesSql(Protocol[S_co, A_contra]):
    def sizes(self) -> Generator[S_co, A_contra, list[TableSize]]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class PlanSql(Generic[S, A]):
    """A dialect's statement modules, by the name every dialect gives them."""

    schema: SchemaSql[S, A]
    jobs: JobsSql[S, A]
    admin: AdminSql[S, A]
    cancel: CancelSql[S, A]
    cluster: ClusterSql[S, A]
    rates: RatesSql[S, A]
    kinds: KindsSql[S, A]
    controls: ControlsSql[S, A]
    sizes: SizesSql[S, A]


class PlanStore(abc.ABC, Generic[S, A]):
    """The forwarding half of a plan-running store. ``_where`` names the database in
    messages (never with its password)."""

    _sql: PlanSql[S, A]
    _where: str
    _errors: Translator

    def failures(self) -> list[StoreFailure]:
        return self._errors.failures()

    @abc.abstractmethod
    async def _read(self, operation: str, make: Callable[[], Plan[S, A, T]]) -> T:
        """Run a plan that only reads."""

    @abc.abstractmethod
    async def _write(
        self, operation: str, make: Callable[[], Plan[S, A, T]], *, tx: bool = False
    ) -> T:
        """Run a plan that writes; ``tx``: it is one transaction of several steps
        (where the dialect's plans do not frame their own)."""

    async def _beat(self, operation: str, make: Callable[[], Plan[S, A, T]]) -> T:
        """Run a write that keeps this server alive (its heartbeat, the leader's lease):
        it touches only kiln's cluster rows, which no user transaction locks, so a
        dialect whose writes wait in line (MariaDB's kept connection) runs it apart from
        them. A results write waiting on a user's row lock never delays a heartbeat."""
        return await self._write(operation, make)

    # schema --------------------------------------------------------------------------
    async def schema_check(self) -> None:
        have = await self._read("schema_check", self._sql.schema.version)
        _migrations.require(have, self._sql.schema.latest(), self._where)

    async def schema_version(self) -> int:
        return await self._read("schema_version", self._sql.schema.version)

    # jobs ----------------------------------------------------------------------------
    async def job_param_set(
        self, job_id: int, server_id: str, attempt: int, name: str, value: Any
    ) -> bool:
        return await self._write(
            "job_param_set",
            lambda: self._sql.jobs.param_set(job_id, server_id, attempt, name, value),
        )

    async def job_get(self, job_id: int) -> JobRow | None:
        return await self._read("job_get", lambda: self._sql.admin.get(job_id))

    async def job_list(
        self, filter: JobFilter, limit: int = 50, before_id: int | None = None,
        after_id: int | None = None, *, brief: bool = False,
    ) -> list[JobRow]:
        return await self._read(
            "job_list",
            lambda: self._sql.admin.list_jobs(filter, limit, before_id, after_id, brief),
        )

    async def job_ids(
        self, filter: JobFilter, limit: int, before_id: int | None = None
    ) -> list[int]:
        return await self._read(
            "job_ids", lambda: self._sql.admin.list_ids(filter, limit, before_id)
        )

    async def job_count(self, filter: JobFilter) -> int:
        return await self._read("job_count", lambda: self._sql.admin.count(filter))

    async def job_id_sums(self, filter: JobFilter) -> tuple[int, int, int, int, int]:
        return await self._read("job_id_sums", lambda: self._sql.admin.id_sums(filter))

    async def jobs_requeue(self, filter: JobFilter, dead_after: float = DEAD_AFTER) -> int:
        return await self._write(
            "jobs_requeue", lambda: self._sql.admin.requeue(filter, dead_after)
        )

    async def jobs_make_due(self, filter: JobFilter) -> int:
        return await self._write("jobs_make_due", lambda: self._sql.admin.make_due(filter))

    async def jobs_admit_lifted(self, filter: JobFilter, retries_only: bool = False) -> int:
        return await self._write("jobs_admit_lifted",
                                 lambda: self._sql.admin.admit_lifted(filter, retries_only))

    async def jobs_cancel(self, filter: JobFilter, actor: str | None = None) -> int:
        return await self._write("jobs_cancel", lambda: self._sql.cancel.cancel(filter, actor))

    async def jobs_cancel_requested(self, job_ids: Sequence[int]) -> list[CancelRequest]:
        if not job_ids:
            return []
        return await self._read(
            "jobs_cancel_requested", lambda: self._sql.cancel.cancel_requested(job_ids)
        )

    async def jobs_delete(self, filter: JobFilter) -> int:
        return await self._write("jobs_delete", lambda: self._sql.admin.delete(filter), tx=True)

    async def job_dependents(self, job_id: int) -> list[int]:
        return await self._read("job_dependents", lambda: self._sql.admin.dependents(job_id))

    async def job_dependency_results(self, job_id: int) -> dict[int, Any]:
        return await self._read(
            "job_dependency_results", lambda: self._sql.admin.dependency_results(job_id)
        )

    async def job_counts(
        self, states: Sequence[JobState] | None = None, *, cap: int | None = None
    ) -> list[StateCount]:
        return await self._read("job_counts", lambda: self._sql.admin.state_counts(states, cap))

    async def queue_oldest_available(self) -> dict[str, float]:
        return await self._read("queue_oldest_available", self._sql.admin.oldest_available)

    async def queue_scheduled_due(self) -> dict[str, int]:
        return await self._read("queue_scheduled_due", self._sql.admin.scheduled_due)

    async def job_throughput(self, since_seconds: float) -> dict[str, int]:
        return await self._read(
            "job_throughput", lambda: self._sql.admin.throughput(since_seconds)
        )

    async def job_counts_by_kind(self) -> list[tuple[str, JobState, int]]:
        return await self._read("job_counts_by_kind", self._sql.admin.counts_by_kind)

    async def job_kind_counts(self, cap: int) -> list[KindCount]:
        return await self._read("job_kind_counts", lambda: self._sql.admin.kind_counts(cap))

    async def jobs_available_by_kind(self, cap: int | None = None) -> list[tuple[str, str, int]]:
        return await self._read("jobs_available_by_kind",
                                lambda: self._sql.admin.available_by_kind(cap))

    async def job_error_groups(
        self, filter: JobFilter, limit: int, scan: int = ERROR_GROUP_SCAN
    ) -> list[tuple[str, int, int]]:
        return await self._read(
            "job_error_groups", lambda: self._sql.admin.error_groups(filter, limit, scan)
        )

    async def job_timings(
        self, since_seconds: float, bucket_seconds: float, by: str
    ) -> list[TimingRow]:
        return await self._read(
            "job_timings", lambda: self._sql.admin.timings(since_seconds, bucket_seconds, by)
        )

    async def job_finished_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[int, str, int]]:
        return await self._read(
            "job_finished_series",
            lambda: self._sql.admin.finished_series(since_seconds, bucket_seconds),
        )

    async def queue_completed_series(
        self, since_seconds: float, bucket_seconds: float
    ) -> list[tuple[str, int, int]]:
        return await self._read(
            "queue_completed_series",
            lambda: self._sql.admin.completed_series_by_queue(since_seconds, bucket_seconds),
        )

    async def queue_running_counts(self) -> list[tuple[str, str, int]]:
        return await self._read("queue_running_counts", self._sql.admin.running_by_server)

    # servers, leader, maintenance ----------------------------------------------------
    async def server_register(self, info: ServerInfo) -> None:
        await self._write("server_register", lambda: self._sql.cluster.server_register(info))

    async def server_heartbeat(self, server_id: str, connections: int | None = None) -> bool:
        return await self._beat(
            "server_heartbeat",
            lambda: self._sql.cluster.server_heartbeat(server_id, connections),
        )

    async def server_deregister(self, server_id: str) -> None:
        await self._write(
            "server_deregister", lambda: self._sql.cluster.server_deregister(server_id)
        )

    async def server_list(self) -> list[ServerInfo]:
        return await self._read("server_list", self._sql.cluster.server_list)

    async def leader_elect(self, server_id: str, ttl: float) -> bool:
        return await self._beat(
            "leader_elect", lambda: self._sql.cluster.leader_elect(server_id, ttl)
        )

    async def leader_resign(self, server_id: str) -> None:
        await self._write("leader_resign", lambda: self._sql.cluster.leader_resign(server_id))

    async def leader_get(self) -> str | None:
        return await self._read("leader_get", self._sql.cluster.leader_get)

    async def installation_get(self) -> str | None:
        return await self._read("installation_get", self._sql.cluster.installation_get)

    async def jobs_rescue_candidates(self, dead_after: float, limit: int) -> list[RescueCandidate]:
        return await self._read(
            "jobs_rescue_candidates",
            lambda: self._sql.cluster.rescue_candidates(dead_after, limit),
        )

    async def jobs_running_on(
        self, server_id: str, older_than: float, limit: int
    ) -> list[RunningJob]:
        return await self._read(
            "jobs_running_on", lambda: self._sql.cluster.running_on(server_id, older_than, limit)
        )

    async def jobs_ending_release(self, dead_after: float) -> int:
        return await self._write(
            "jobs_ending_release", lambda: self._sql.cluster.ending_dead(dead_after)
        )

    async def servers_sweep(self, dead_for: float) -> int:
        return await self._write("servers_sweep", lambda: self._sql.cluster.sweep(dead_for))

    async def jobs_prune(self, state: JobState, older_than: float, limit: int) -> int:
        return await self._write(
            "jobs_prune", lambda: self._sql.cluster.prune(state, older_than, limit), tx=True
        )

    async def timings_roll(self) -> tuple[int, bool]:
        return await self._write("timings_roll", self._sql.cluster.timings_roll, tx=True)

    async def timings_rolled_to(self) -> int | None:
        return await self._read("timings_rolled_to", self._sql.cluster.timings_rolled_to)

    async def jobs_release_stranded(self, limit: int) -> dict[str, int]:
        return await self._write(
            "jobs_release_stranded", lambda: self._sql.cluster.release_stranded(limit), tx=True
        )

    # published kind declarations -----------------------------------------------------
    async def kinds_publish(
        self, server_id: str, host: str, pid: int, kinds: Sequence[KindDeclaration]
    ) -> None:
        await self._write(
            "kinds_publish", lambda: self._sql.kinds.publish(server_id, host, pid, kinds),
            tx=True,
        )

    async def kind_declarations(self) -> list[KindDeclaration]:
        return await self._read("kind_declarations", self._sql.kinds.newest)

    async def kinds_list(self) -> list[PublishedKind]:
        return await self._read("kinds_list", self._sql.kinds.listed)

    async def kind_conflicts(self) -> int:
        return await self._read("kind_conflicts", self._sql.kinds.conflicts)

    async def table_sizes(self) -> list[TableSize]:
        return await self._read("table_sizes", self._sql.sizes.sizes)

    # rate limits ---------------------------------------------------------------------
    async def rate_limit_declare(self, key: str, limit: RateLimit) -> None:
        await self._write(
            "rate_limit_declare", lambda: self._sql.rates.rate_limit_declare(key, limit)
        )

    async def rate_keys_pending(self) -> list[str]:
        return await self._read("rate_keys_pending", self._sql.rates.rate_keys_pending)

    async def jobs_admit(
        self, key: str, max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> AdmitResult:
        chosen = None if queues is None else sorted(queues)
        return await self._write(
            "jobs_admit", lambda: self._sql.rates.admit(key, max_batch, chosen, ahead),
            tx=True,
        )

    async def jobs_admit_keys(
        self, keys: Sequence[str], max_batch: int, queues: Sequence[str] | None = None,
        ahead: float = 0.0,
    ) -> dict[str, AdmitResult]:
        chosen = None if queues is None else sorted(queues)
        ordered = sorted(set(keys))
        return await self._write(
            "jobs_admit_keys",
            lambda: self._sql.rates.admit_keys(ordered, max_batch, chosen, ahead), tx=True,
        )

    async def rate_keys_prune(self, idle_for: float, keep: Sequence[str], limit: int) -> int:
        return await self._write(
            "rate_keys_prune",
            lambda: self._sql.rates.rate_keys_prune(idle_for, sorted(keep), limit), tx=True,
        )

    async def rate_limit_list(self) -> list[tuple[str, RateLimit, int]]:
        return await self._read("rate_limit_list", self._sql.rates.rate_limit_list)

    async def rate_keys_backlog(
        self, limit: int, *, cap: int | None = None
    ) -> list[tuple[str, RateLimit | None, int]]:
        return await self._read("rate_keys_backlog",
                                lambda: self._sql.rates.rate_keys_backlog(limit, cap))

    # recurring jobs and audit --------------------------------------------------------
    async def cron_last_slot(self, name: str) -> datetime | None:
        return await self._read("cron_last_slot", lambda: self._sql.cluster.cron_last_slot(name))

    async def audit_record(
        self, actor: str, action: str, count: int, detail: dict[str, Any]
    ) -> None:
        await self._write(
            "audit_record", lambda: self._sql.cluster.audit_record(actor, action, count, detail)
        )

    async def audit_list(
        self, limit: int = 50, query: AuditQuery | None = None
    ) -> list[AuditEntry]:
        q = query or AuditQuery()
        return await self._read("audit_list", lambda: self._sql.cluster.audit_list(limit, q))

    # queue controls ------------------------------------------------------------------
    async def queue_pause(self, queue: str, actor: str) -> bool:
        return await self._write(
            "queue_pause", lambda: self._sql.controls.pause(queue, actor), tx=True
        )

    async def queue_resume(self, queue: str, actor: str) -> int:
        return await self._write(
            "queue_resume", lambda: self._sql.controls.resume(queue, actor), tx=True
        )

    async def queue_limit_set(
        self, queue: str, server_id: str, concurrency: int | None, actor: str
    ) -> None:
        await self._write(
            "queue_limit_set",
            lambda: self._sql.controls.limit_set(queue, server_id, concurrency, actor),
            tx=True,
        )

    async def queue_controls(self) -> QueueControls:
        return await self._read("queue_controls", self._sql.controls.controls)
