"""Request parameters of the dashboard: parsed, bounded and typed, or a 400 that says why.

Owns the rules for every query-string and form value the dashboard accepts. Values
reach the store only as typed fields of a JobFilter; nothing here builds SQL.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode

from starlette.exceptions import HTTPException

from kiln._model._job import JobFilter, JobState
from kiln.web import _filters
from kiln.web._filters import Pairs

MAX_TEXT = 200  # the longest queue, kind or error filter accepted
MAX_ERROR = 4096  # the longest error message an error group's filter names (stored: ~2,000)
MAX_ID = 2**63 - 1  # job ids are BIGINT
MAX_SELECTION = 1000
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
STATE_NAMES = tuple(s.value for s in JobState)
# ASCII digits only: str.isdigit() also accepts "²" and "٣", which int() then rejects
WHOLE = re.compile(r"-?[0-9]{1,19}")


class BadRequest(HTTPException):
    """A parameter the dashboard cannot use; rendered as a 400 with ``detail``."""

    def __init__(self, detail: str) -> None:
        super().__init__(status_code=400, detail=detail)


def text(params: Mapping[str, str], name: str) -> str | None:
    """An optional free-text value: blank means absent."""
    raw = params.get(name)
    if raw is None or not raw.strip():
        return None
    if len(raw) > MAX_TEXT:
        raise BadRequest(f"{name} is {len(raw)} characters long; the limit is {MAX_TEXT}")
    if "\x00" in raw:
        raise BadRequest(f"{name} must not contain NUL characters")
    return raw.strip()


def error_is(params: Mapping[str, str]) -> str | None:
    """An error group: the exact last error message (kept as given, spaces included)."""
    raw = params.get("error_is")
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_ERROR:
        raise BadRequest(f"error_is is {len(raw)} characters long; the limit is {MAX_ERROR}")
    if "\x00" in raw:
        raise BadRequest("error_is must not contain NUL characters")
    return raw


def whole(raw: str, name: str, low: int, high: int) -> int:
    """``raw`` as an integer in [low, high], or a 400 naming the parameter."""
    value = raw.strip()
    if WHOLE.fullmatch(value) is None:
        raise BadRequest(f"{name} must be a whole number, got {raw[:40]!r}")
    number = int(value)
    if not low <= number <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, got {number}")
    return number


def integer(params: Mapping[str, str], name: str, default: int | None, low: int, high: int
            ) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    return whole(raw, name, low, high)


def job_id(raw: str) -> int:
    return whole(raw, "job id", 1, MAX_ID)


def state(params: Mapping[str, str]) -> JobState | None:
    raw = params.get("state")
    if raw is None or raw in ("", "all"):
        return None
    try:
        return JobState(raw)
    except ValueError:
        shown = raw[:40]
        raise BadRequest(
            f"unknown state {shown!r}: use one of all, {', '.join(STATE_NAMES)}"
        ) from None


def ids(values: Sequence[str]) -> tuple[int, ...]:
    if not values:
        raise BadRequest("select at least one job")
    if len(values) > MAX_SELECTION:
        raise BadRequest(f"at most {MAX_SELECTION} jobs can be selected at once")
    return tuple(dict.fromkeys(job_id(v) for v in values))


def upper_bound(params: Mapping[str, str]) -> tuple[int, datetime | None]:
    """The ``max_id`` and ``finished_before`` a confirmation page showed (see _actions)."""
    if not params.get("max_id"):
        raise BadRequest("this confirmation carries no bound (max_id): open the "
                         "confirmation page again and confirm there")
    max_id = whole(params["max_id"], "max_id", 0, MAX_ID)
    raw = params.get("finished_before") or ""
    if not raw:
        return max_id, None
    if len(raw) > MAX_TIME:
        raise BadRequest(f"finished_before is {len(raw)} characters long; a time has at "
                         f"most {MAX_TIME}")
    try:
        at = datetime.fromisoformat(raw[:40])
    except ValueError:
        raise BadRequest(f"finished_before must be an ISO 8601 time, got {raw[:40]!r}") from None
    if at.tzinfo is None:
        raise BadRequest(f"finished_before needs a time zone, got {raw[:40]!r}")
    return max_id, at


DIGEST = re.compile(r"[0-9a-f]{32}")


def shown_set(params: Mapping[str, str]) -> tuple[int, str]:
    """The count and fingerprint of the set a confirmation page showed (see _actions)."""
    raw = params.get("digest") or ""
    if not params.get("count") or not DIGEST.fullmatch(raw):
        raise BadRequest("this confirmation carries no count and fingerprint of the jobs "
                         "it showed: open the confirmation page again and confirm there")
    return whole(params["count"], "count", 0, MAX_ID), raw


RELATIVE = re.compile(r"([0-9]{1,6})([smhd])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
ORDERS = ("newest", "oldest")


def moment(params: Mapping[str, str], name: str) -> str | None:
    """A time-range bound as given: an age ("15m", "2h", "7d": that long ago) or an
    ISO 8601 time (UTC when it names no zone). Checked here, resolved by ``at``."""
    raw = text(params, name)
    if raw is None:
        return None
    at(raw, name)
    return raw


MAX_TIME = 40  # characters of a time value; a longer one is refused, never cut


def at(raw: str, name: str = "time") -> datetime:
    if len(raw) > MAX_TIME:
        raise BadRequest(f"{name} is {len(raw)} characters long; a time has at most "
                         f"{MAX_TIME}, got {raw[:40]!r}...")
    match = RELATIVE.fullmatch(raw)
    if match is not None:
        ago = int(match.group(1)) * UNITS[match.group(2)]
        if ago > 3650 * 86400:
            raise BadRequest(f"{name} reaches back more than ten years: {raw!r}")
        return datetime.now(UTC) - timedelta(seconds=ago)
    try:
        value = datetime.fromisoformat(raw[:40])
    except ValueError:
        raise BadRequest(f"{name} must be an age such as 15m, 2h or 7d, or an ISO 8601 "
                         f"time such as 2026-12-03T09:30, got {raw[:40]!r}") from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def order(params: Mapping[str, str]) -> str:
    raw = params.get("order") or "newest"
    if raw not in ORDERS:
        raise BadRequest(f"order must be newest or oldest, got {raw[:40]!r}")
    return raw


@dataclasses.dataclass(frozen=True, slots=True)
class JobQuery:
    """What a jobs listing shows: a tab (state), filters and a keyset page."""

    state: JobState | None = None
    queue: str | None = None
    kind: str | None = None
    error: str | None = None
    before: int | None = None
    limit: int = DEFAULT_LIMIT
    since: str | None = None  # enqueued at or after (an age or a time, see ``moment``)
    until: str | None = None  # enqueued before
    order: str = "newest"  # newest first (paged by ``before``) or oldest (by ``after``)
    after: int | None = None
    tags: tuple[str, ...] = ()
    meta: Pairs = ()
    args: Pairs = ()
    error_is: str | None = None  # an error group: the last attempt's error, exactly

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> JobQuery:
        limit = integer(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        query = cls(
            state=state(params),
            queue=text(params, "queue"),
            kind=text(params, "kind"),
            error=text(params, "error"),
            before=integer(params, "before", None, 1, MAX_ID),
            limit=DEFAULT_LIMIT if limit is None else limit,
            since=moment(params, "since"),
            until=moment(params, "until"),
            order=order(params),
            after=integer(params, "after", None, 0, MAX_ID),
            tags=_filters.tags(params),
            meta=_filters.pairs(params, "meta", "metadata"),
            args=_filters.pairs(params, "arg", "args"),
            error_is=error_is(params),
        )
        if query.before is not None and query.after is not None:
            raise BadRequest("give before (newest first) or after (oldest first), not both")
        if query.since is not None and query.until is not None \
                and at(query.since, "since") >= at(query.until, "until"):
            raise BadRequest(f"since ({query.since}) is not before until ({query.until}): "
                             "that range holds no job")
        return query

    def filter(self) -> JobFilter:
        return JobFilter(
            states=(self.state,) if self.state is not None else (),
            queue=self.queue, kind=self.kind, error=self.error,
            last_error=self.error_is,
            created_after=None if self.since is None else at(self.since, "since"),
            created_before=None if self.until is None else at(self.until, "until"),
            tags=self.tags, metadata=dict(self.meta), args=dict(self.args),
        )

    def pinned(self) -> JobQuery:
        """This query with its time range as absolute times and no page cursor: what a
        confirmation posts back, so "since 1h" means the same jobs when it is confirmed."""
        def fixed(raw: str | None, name: str) -> str | None:
            return None if raw is None else at(raw, name).isoformat()

        return dataclasses.replace(self, since=fixed(self.since, "since"),
                                   until=fixed(self.until, "until"), before=None, after=None)

    def fields(self) -> list[tuple[str, str]]:
        """The pinned query as form fields (the hidden inputs of a confirmation)."""
        return parse_qsl(self.pinned().query(limit=None))

    def page(self) -> tuple[int | None, int | None]:
        """The keyset cursor for the store: (before_id, after_id)."""
        if self.order == "oldest":
            return None, self.after or 0
        return self.before, None

    def next_page(self, last_id: int) -> str:
        """The query of the page after one whose last row is ``last_id``, its time range
        pinned (``since=1h`` as the time it meant), so paging does not slide the range."""
        if self.order == "oldest":
            return self.pinned().query(after=last_id, before=None)
        return self.pinned().query(before=last_id, after=None)

    @property
    def filtered(self) -> bool:
        return any(v is not None for v in (self.queue, self.kind, self.error, self.since,
                                           self.until, self.error_is)) \
            or bool(self.tags or self.meta or self.args)

    def tag_fields(self) -> list[tuple[str, str]]:
        """The tag, metadata and args filters as repeated form fields."""
        return ([("tag", t) for t in self.tags]
                + [("meta", _filters.pair_text(k, v)) for k, v in self.meta]
                + [("arg", _filters.pair_text(k, v)) for k, v in self.args])

    def query(self, **changes: object) -> str:
        """This query as a query string, with ``changes`` applied (None drops a field;
        ``tags=None`` drops the tag, metadata and args filters)."""
        values: dict[str, object] = {
            "state": self.state.value if self.state else None, "queue": self.queue,
            "kind": self.kind, "error": self.error, "error_is": self.error_is,
            "before": self.before,
            "limit": self.limit if self.limit != DEFAULT_LIMIT else None,
            "since": self.since, "until": self.until,
            "order": self.order if self.order != "newest" else None, "after": self.after,
        }
        keep_tags = changes.pop("tags", True) is not None
        extra = {k: v for k, v in changes.items() if k not in values}  # done, n: last
        values.update((k, v) for k, v in changes.items() if k not in extra)
        pairs = [(k, str(v)) for k, v in values.items() if v is not None and v != ""]
        pairs += self.tag_fields() if keep_tags else []
        pairs += [(k, str(v)) for k, v in extra.items() if v is not None and v != ""]
        return urlencode(pairs)
