"""The job record, its states and the values that cross the store boundary.

Owns plain data only: no I/O, no SQL, no scheduling decisions.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from kiln._errors import ConfigError, ValidationError
from kiln._model._deprecated import deprecated

JSON = Any


class JobState(enum.StrEnum):
    """Where a job is in its lifecycle (see docs/adr/0002-store-contract.md)."""

    AWAITING = "awaiting"  # waits for its dependencies to complete
    PENDING = "pending"  # waits for rate-limit admission
    SCHEDULED = "scheduled"  # run_at in the future (delay, retry backoff, snooze)
    AVAILABLE = "available"  # claimable now
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"  # out of attempts, or failed permanently
    CANCELLED = "cancelled"


ALL_STATES: tuple[JobState, ...] = tuple(JobState)
FINISHED_STATES = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED})


class Outcome(enum.StrEnum):
    """What happened to one attempt; the store applies it with fencing."""

    COMPLETED = "completed"
    RETRY = "retry"  # failed attempt, scheduled again after backoff
    FAILED = "failed"  # failed for good
    SNOOZED = "snoozed"  # run again later without using an attempt
    CANCELLED = "cancelled"  # cancelled permanently by the handler
    HANDED_BACK = "handed_back"  # shutdown: back to the queue without using an attempt


@dataclasses.dataclass(frozen=True, slots=True)
class AttemptError:
    """The error of one failed attempt, kept on the job."""

    attempt: int
    at: float  # unix seconds
    error: str
    traceback: str = ""
    server_id: str | None = None
    # for the job's timeline: when the attempt was due and when it started (unix
    # seconds, database clock), where the worker knew them; absent in older records
    due_at: float | None = None
    started_at: float | None = None

    def to_json(self) -> dict[str, JSON]:
        data: dict[str, JSON] = dataclasses.asdict(self)
        for key in ("due_at", "started_at"):
            if data[key] is None:
                del data[key]  # records stay as small as they were without them
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, JSON]) -> AttemptError:
        return cls(
            attempt=int(data.get("attempt", 0)),
            at=float(data.get("at", 0.0)),
            error=str(data.get("error", "")),
            traceback=str(data.get("traceback", "")),
            server_id=data.get("server_id"),
            due_at=_seconds(data.get("due_at")),
            started_at=_seconds(data.get("started_at")),
        )


def _seconds(value: JSON) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``rate`` admissions per ``per`` seconds, plus ``burst``.

    Invariant kept by every store: no window of length ``per`` admits more than
    ``rate + burst`` jobs of one key.

    ``key``: None (one limit for the kind's rate key), or ``"args.NAME"`` /
    ``"metadata.NAME"``: one limit per value of that top-level argument or metadata
    entry (per tenant, say), for every producer, the kind's published declaration
    included. The job's rate key is then ``"<kind's rate key>|<value>"``; a job without
    the value is refused. A rate_key given at enqueue wins.
    """

    rate: int
    per: float = 1.0  # seconds; a timedelta is accepted and stored as seconds
    burst: int = 0
    key: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.per, timedelta):
            object.__setattr__(self, "per", self.per.total_seconds())
        # one bad limit would fail every admission of its key, on every server (issue 39
        # item 5): refused here, before it is declared, published or stored
        rate, per, burst = self.rate, self.per, self.burst
        if not _whole(rate) or rate < 1:
            raise RateLimitError("rate_limit.rate", rate, "rate must be a whole number of"
                                 f" admissions, at least 1 ({self._shown()})")
        if isinstance(per, bool) or not isinstance(per, int | float) \
                or not math.isfinite(per) or per <= 0:
            raise RateLimitError("rate_limit.per", per, "per must be a finite number of"
                                 f" seconds above 0, or a timedelta ({self._shown()})")
        if not _whole(burst) or burst < 0:
            raise RateLimitError("rate_limit.burst", burst, "burst must be a whole number,"
                                 f" 0 or more ({self._shown()})")
        key = self.key
        if key is not None and not (isinstance(key, str) and key.partition(".")[0] in
                                    ("args", "metadata") and key.partition(".")[2]):
            raise RateLimitError("rate_limit.key", key,
                                 'use None, "args.NAME" or "metadata.NAME"')

    def key_of(self, base: str, args: Any, metadata: Mapping[str, Any]) -> str:
        """The rate key of a job whose limit is keyed (``key``): ``base`` (the kind's
        rate key) and the value ``key`` names; a ValidationError when the job has no
        such value (nothing is written). Long or unprintable values are hashed."""
        assert self.key is not None
        where, _, name = self.key.partition(".")
        source = args if where == "args" else metadata
        if not isinstance(source, Mapping) or name not in source:
            raise ValidationError(
                f"rate limit key {self.key}: the job's {where} have no top-level key"
                f" {name!r} (nothing was written)")
        value = source[name]
        text = value if isinstance(value, str) else json.dumps(
            value, sort_keys=True, separators=(",", ":"), default=str)
        stored = f"{base}|{text}"
        if len(stored) <= 200 and stored.isprintable() and stored == stored.strip():
            return stored
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return f"{base[:150]}|#{digest}"

    def _shown(self) -> str:
        key = "" if self.key is None else f", key={self.key!r}"
        return f"RateLimit(rate={self.rate!r}, per={self.per!r}, burst={self.burst!r}{key})"

    def to_json(self) -> dict[str, Any]:
        """As published: ``key`` only when set, so unkeyed limits publish as before."""
        out: dict[str, Any] = {"rate": self.rate, "per": self.per, "burst": self.burst}
        if self.key is not None:
            out["key"] = self.key
        return out


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class RateLimitError(ConfigError, ValidationError):
    """A RateLimit that cannot be kept: both a ConfigError (a kind's option) and a
    ValidationError (an enqueue's), nothing declared or written."""


MAX_ATTEMPTS = 25  # attempts a job gets unless its kind or its enqueue says otherwise
DEFAULT_QUEUE = "default"  # the queue of a kind or a job that names none
DEAD_AFTER = 60.0  # seconds of heartbeat silence before a server is dead: ServerConfig's default


@dataclasses.dataclass(slots=True)
class NewJob:
    """A job to insert. The store picks the first state from its fields."""

    kind: str
    args: JSON
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    run_at: datetime | None = None  # None: now, by the database clock
    delay: float = 0.0  # seconds after the database's now; ignored when run_at is set
    max_attempts: int = MAX_ATTEMPTS
    timeout: float | None = None  # seconds; None: the kind's or server's default
    backoff: JSON = None  # a serialisable policy spec, see kiln._model._retry
    metadata: dict[str, JSON] = dataclasses.field(default_factory=dict)
    rate_key: str | None = None
    rate_limit: RateLimit | None = None
    depends_on: Sequence[int] = ()
    # unique jobs (kiln.Unique): the key (without its period bucket), a bit per state
    # that counts (UNIQUE_BITS), and the period in seconds the store buckets by its clock
    unique_key: str | None = None
    unique_states: int = 0
    unique_period: float | None = None
    tags: tuple[str, ...] = ()  # checked by kiln._model._tags; stored and indexed
    # a global concurrency limit (kiln._model._concurrency): the key the claim counts running
    # jobs by, and the most of them at once (declared in kiln_concurrency_keys)
    conc_key: str | None = None
    conc_max: int = 0
    # positions of earlier jobs of the same insert this one depends on (enqueue_chain,
    # enqueue_fan_in): the store inserts them first, in the same transaction, and adds
    # their ids to depends_on
    after: tuple[int, ...] = ()
    # the options given neither at enqueue nor by a declaration of the kind (the
    # producer had none): a bit each (kiln._model._adoption), 0 for every other job
    defaulted: int = 0
    # args as JSON text, when enqueue_many already encoded them (kiln._client._batch); the
    # stores send it as is. Set only by kiln; None: the store encodes ``args``.
    args_json: str | None = dataclasses.field(default=None, repr=False, compare=False)


# one bit per state, as the stores' unique indexes test them (migration 0004)
UNIQUE_BITS: dict[JobState, int] = {s: 1 << i for i, s in enumerate(JobState)}


class EnqueueResult(int):
    """A job's id (an ``int``, so existing code keeps working) that also says whether
    this enqueue inserted it: ``inserted`` is False when a unique job already existed,
    and the id is then the existing job's."""

    inserted: bool = True  # class default: a plain insert sets nothing per result

    def __new__(cls, job_id: int, inserted: bool = True) -> EnqueueResult:
        result = super().__new__(cls, job_id)
        if not inserted:
            result.inserted = False
        return result

    @property
    def id(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"EnqueueResult(id={int(self)}, inserted={self.inserted})"

    def __str__(self) -> str:  # print(job_id) prints the id, as it did for a plain int
        return int.__repr__(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EnqueueResult, (int(self), self.inserted))


@dataclasses.dataclass(slots=True)
class JobRow:
    """A job as the store holds it."""

    id: int
    queue: str
    kind: str
    state: JobState
    args: JSON
    params: dict[str, JSON]
    metadata: dict[str, JSON]
    priority: int
    run_at: datetime
    attempt: int
    max_attempts: int
    timeout: float | None
    backoff: JSON
    errors: list[AttemptError]
    created_at: datetime
    admitted_at: datetime | None
    attempted_at: datetime | None
    finished_at: datetime | None
    server_id: str | None
    rate_key: str | None
    rescues: int
    depends_on: list[int] = dataclasses.field(default_factory=list)
    # what the handler of a completed job returned (docs/guide.md, "Stored results"):
    # read by the store's job_get only, None in claims and listings (a result can be
    # up to max_result_bytes), and None when the handler returned None
    result: JSON = None
    tags: list[str] = dataclasses.field(default_factory=list)
    # in a brief listing (Store.job_list(brief=True)): the JSON values left out for their
    # size, by column, with their size in bytes as JSON text: args, params and metadata
    # read as None, errors as the last attempt's record without its traceback
    cut: dict[str, int] = dataclasses.field(default_factory=dict)
    # the concurrency key the claim counted it under (kiln._model._concurrency), None
    # without one: a server rekeys a job claimed under a key its declaration no longer
    # gives (kiln._server._misfiled)
    conc_key: str | None = None

    @property
    def last_error(self) -> AttemptError | None:
        return self.errors[-1] if self.errors else None


@dataclasses.dataclass(frozen=True, slots=True)
class JobResult:
    """The outcome of one attempt, applied only while the job is still running
    under ``server_id`` and ``attempt`` (fencing)."""

    job_id: int
    server_id: str
    attempt: int
    outcome: Outcome
    run_at_delay: float = 0.0  # for RETRY and SNOOZED: seconds after the database's now
    error: AttemptError | None = None
    rescued: bool = False  # the result was written by a rescuer, not the server itself
    # for COMPLETED: the handler's return value as JSON text (kiln._model._results), bounded
    # by max_result_bytes; None when it returned None, which stores nothing
    result: str | None = None
    # when the attempt was claimed (the row's attempted_at): the fence of a result that
    # gives the attempt back (a snooze, a hand-back), whose number the next claim reuses,
    # so a copy written again late cannot apply to that next claim
    claimed_at: datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class JobFilter:
    """Selects jobs for listing and bulk admin operations (``kiln.filter_of`` builds
    one with its fields checked; the fields are named as its keywords, ``state`` and
    ``states`` aside). ``error``: the text of an attempt's error contains it."""

    states: tuple[JobState, ...] = ()
    queue: str | None = None
    kind: str | None = None
    error: str | None = None
    # the error message of the job's last attempt is exactly this text (an error group)
    last_error: str | None = None
    ids: tuple[int, ...] = ()
    # upper bounds, so a bulk action does what its confirmation showed and no more:
    # jobs with a greater id, or that finished later (or not at all), do not match
    max_id: int | None = None
    finished_before: datetime | None = None
    # a lower bound (inclusive): a listing that no index serves in id order scans a
    # window of ids, not the table (the dashboard's Available tab and args filters)
    min_id: int | None = None
    # a time range of enqueueing: created_after <= created_at < created_before
    created_after: datetime | None = None
    created_before: datetime | None = None
    # all of these tags; top-level keys of metadata / args equal to these values
    # (strings, numbers or booleans; see kiln._model._tags.check_filter)
    # (hash=False: a filter stays hashable; equal filters still hash alike)
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, JSON] = dataclasses.field(default_factory=dict, hash=False)
    args: Mapping[str, JSON] = dataclasses.field(default_factory=dict, hash=False)


def _old_names(cls: type[JobFilter]) -> None:
    """``error`` was ``error_contains``: the old keyword and attribute keep working for
    one release, each with a DeprecationWarning (not a field: ``replace`` ignores it)."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: JobFilter, *args: Any, error_contains: str | None = None,
                 **fields: Any) -> None:
        if error_contains is not None:
            deprecated("JobFilter(error_contains=...)", "JobFilter(error=...)")
            fields.setdefault("error", error_contains)
        init(self, *args, **fields)

    def error_contains(self: JobFilter) -> str | None:
        deprecated("JobFilter.error_contains", "JobFilter.error")
        return self.error

    setattr(cls, "__init__", __init__)  # noqa: B010
    setattr(cls, "error_contains", property(error_contains))  # noqa: B010


_old_names(JobFilter)


@dataclasses.dataclass(frozen=True, slots=True)
class ServerInfo:
    """A registered server, as the servers table holds it."""

    id: str
    host: str
    pid: int
    queues: dict[str, int]
    kinds: list[str]
    version: str
    started_at: datetime
    heartbeat_at: datetime | None = None
    heartbeat_age: float | None = None  # seconds, by the database clock
    # database connections its process held at its last heartbeat (None: not said)
    connections: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RescueCandidate:
    """A running job whose server has been silent for longer than dead_after."""

    job: JobRow
    dead_server_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class RunningJob:
    """A job the database says runs on a server, for reconciliation."""

    id: int
    queue: str
    kind: str
    attempt: int


@dataclasses.dataclass(frozen=True, slots=True)
class Admission:
    """One admitted rate-limited job."""

    job_id: int
    queue: str
    kind: str
    delay: float  # seconds from created to admitted, by the database clock


@dataclasses.dataclass(frozen=True, slots=True)
class AdmitResult:
    admitted: list[Admission]
    next_at: float | None  # seconds from now until more can be admitted, None if nothing pending
    declared: bool = True  # False: the key has no rate limit in the store, nothing admitted
    # True: another transaction holds the key's row (another admitter, or a producer's
    # open transaction declaring it): skipped this time, never waited on
    busy: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class StateCount:
    """How many jobs of ``queue`` are in ``state``. ``estimated``: more than the cap
    the count was asked with (``Client.counts(cap=...)``), so ``count`` is an estimate
    (never below the cap) rather than an exact count."""

    queue: str
    state: JobState
    count: int
    estimated: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class KindCount:
    """How many jobs of ``kind`` are in ``state``. ``estimated``: the state held more
    jobs than the cap the counts were asked with (``Client.kind_counts``), so ``count``
    is an estimate (never below the jobs of the kind actually seen) rather than exact."""

    kind: str
    state: JobState
    count: int
    estimated: bool = False


# exact up to this many jobs of one state, estimated above it: the Kinds page's counts
# (kiln.stores.postgres._kind_counts)
KIND_COUNT_CAP = 1000

# exact up to this many jobs of one queue and state, estimated above it: what the
# dashboard and the metrics ask for (kiln.stores.postgres._counts)
COUNT_CAP = 100


@dataclasses.dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which audit entries to read, newest first: ``action`` exactly, ``actor``
    containing the text (case-sensitive), written at or after ``since`` and before
    ``until``, with ids below ``before`` (the next page: the last id of the page
    before). Every field left None matches everything."""

    action: str | None = None
    actor: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    before: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AuditEntry:
    """One entry of the audit log: who (``actor``) did what (``action``) to how
    many jobs (``count``), when (database time), with the filter or ids in ``detail``."""

    id: int
    at: datetime
    actor: str
    action: str
    count: int
    detail: dict[str, JSON]


@dataclasses.dataclass(frozen=True, slots=True)
class KindDeclaration:
    """What a server declares of a kind it handles: the options its jobs get by default
    (queue, priority, max_attempts, timeout, backoff, rate_limit, rate_key), as JSON,
    and a digest of them that tells two declarations apart."""

    kind: str
    options: dict[str, JSON]
    digest: str


@dataclasses.dataclass(frozen=True, slots=True)
class PublishedKind:
    """One server's published declaration of a kind, as ``kiln kinds`` lists it."""

    declaration: KindDeclaration
    server_id: str
    host: str
    published_at: datetime
    live: bool  # its server is registered


@dataclasses.dataclass(frozen=True, slots=True)
class CancelRequest:
    """A job a server runs that someone cancelled meanwhile: its handler should stop."""

    id: int
    attempt: int
    server_id: str | None
    age: float  # seconds since the cancel, by the database clock
