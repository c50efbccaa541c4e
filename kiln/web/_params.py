"""Request parameters of the dashboard: parsed, bounded and typed, or a 400 that says why.

Owns the rules for every query-string and form value the dashboard accepts. Values
reach the store only as typed fields of a JobFilter; nothing here builds SQL.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from urllib.parse import urlencode

from starlette.exceptions import HTTPException

from kiln._job import JobFilter, JobState

MAX_TEXT = 200  # the longest queue, kind or error filter accepted
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
    try:
        at = datetime.fromisoformat(raw[:40])
    except ValueError:
        raise BadRequest(f"finished_before must be an ISO 8601 time, got {raw[:40]!r}") from None
    if at.tzinfo is None:
        raise BadRequest(f"finished_before needs a time zone, got {raw[:40]!r}")
    return max_id, at


@dataclasses.dataclass(frozen=True, slots=True)
class JobQuery:
    """What a jobs listing shows: a tab (state), filters and a keyset page."""

    state: JobState | None = None
    queue: str | None = None
    kind: str | None = None
    error: str | None = None
    before: int | None = None
    limit: int = DEFAULT_LIMIT

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> JobQuery:
        limit = integer(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        return cls(
            state=state(params),
            queue=text(params, "queue"),
            kind=text(params, "kind"),
            error=text(params, "error"),
            before=integer(params, "before", None, 1, MAX_ID),
            limit=DEFAULT_LIMIT if limit is None else limit,
        )

    def filter(self) -> JobFilter:
        return JobFilter(
            states=(self.state,) if self.state is not None else (),
            queue=self.queue, kind=self.kind, error_contains=self.error,
        )

    @property
    def filtered(self) -> bool:
        return any(v is not None for v in (self.queue, self.kind, self.error))

    def query(self, **changes: object) -> str:
        """This query as a query string, with ``changes`` applied (None drops a field)."""
        values: dict[str, object] = {
            "state": self.state.value if self.state else None, "queue": self.queue,
            "kind": self.kind, "error": self.error, "before": self.before,
            "limit": self.limit if self.limit != DEFAULT_LIMIT else None,
        }
        values.update(changes)
        pairs = [(k, str(v)) for k, v in values.items() if v is not None and v != ""]
        return urlencode(pairs)
