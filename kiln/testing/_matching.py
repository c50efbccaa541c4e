"""What ``assert_enqueued`` and friends match, and the messages they fail with.

Owns the matching rules (subset match of args and metadata, equality of queue and
priority) and the wording of failures. Plain functions over JobRows: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kiln._errors import ValidationError
from kiln._model._job import JobRow, JobState

# "enqueued": waiting to run. What ran (or runs) no longer counts.
WAITING: tuple[JobState, ...] = (
    JobState.AWAITING, JobState.PENDING, JobState.SCHEDULED, JobState.AVAILABLE,
)
SHOWN = 20  # jobs listed in a failure message
SHOWN_ELSEWHERE = 5  # jobs of the kind in other states
REPR_CAP = 200
_UNSET: Any = object()


@dataclasses.dataclass(frozen=True, slots=True)
class Criteria:
    """What a job must be to match. ``args``/``metadata``: a subset, or a predicate."""

    kind: str | None = None
    args: Any = _UNSET
    queue: str | None = None
    priority: int | None = None
    metadata: Any = _UNSET
    states: tuple[JobState, ...] = WAITING
    tags: tuple[str, ...] = ()  # the job has every one of them (and maybe others)
    depends_on: tuple[int, ...] | None = None  # the job depends on exactly these jobs

    def differences(self, row: JobRow) -> list[str]:
        """Why ``row`` of the wanted kind does not match (empty when it does)."""
        found: list[str] = []
        missing = [t for t in self.tags if t not in row.tags]
        if missing:
            found.append(f"tags are {sorted(row.tags)!r}, without {missing!r}")
        if self.depends_on is not None and sorted(row.depends_on) != list(self.depends_on):
            found.append(f"depends on {sorted(row.depends_on)!r}, not "
                         f"{list(self.depends_on)!r}")
        if self.queue is not None and row.queue != self.queue:
            found.append(f"queue is {row.queue!r}, not {self.queue!r}")
        if self.priority is not None and row.priority != self.priority:
            found.append(f"priority is {row.priority!r}, not {self.priority!r}")
        if self.args is not _UNSET:
            found.extend(_mismatches("args", row.args, self.args))
        if self.metadata is not _UNSET:
            found.extend(_mismatches("metadata", row.metadata, self.metadata))
        return found

    def describe(self, count: int | None, negated: bool = False) -> str:
        if negated:
            head = "no job"
        elif count is None or count == 1:
            head = "a job" if count is None else "1 job"
        else:
            head = f"{count} jobs"
        parts = [head]
        if self.kind is not None:
            parts.append(f"of kind {self.kind!r}")
        if self.args is not _UNSET:
            parts.append(_wanted("args", self.args))
        if self.metadata is not _UNSET:
            parts.append(_wanted("metadata", self.metadata))
        if self.queue is not None:
            parts.append(f"in queue {self.queue!r}")
        if self.priority is not None:
            parts.append(f"with priority {self.priority!r}")
        if self.tags:
            parts.append(f"tagged {', '.join(map(repr, self.tags))}")
        if self.depends_on is not None:
            parts.append(f"depending on {list(self.depends_on)!r}")
        if self.states != WAITING:
            word = "state" if len(self.states) == 1 else "states"
            parts.append(f"in {word} {', '.join(s.value for s in self.states)}")
        return " ".join(parts)


def criteria(
    kind: str | None, *, args: Any, queue: str | None, priority: int | None, metadata: Any,
    state: JobState | str | Sequence[JobState | str] | None,
    tags: Sequence[str] | None = None, depends_on: Iterable[int] | None = None,
) -> Criteria:
    if kind is not None and not isinstance(kind, str):
        raise ValidationError(f"kind must be a job kind's name, got {kind!r}")
    if tags is not None and (isinstance(tags, str)
                             or not all(isinstance(t, str) for t in tags)):
        raise ValidationError(f"tags must be a list of tag names, got {tags!r}")
    wanted_deps: tuple[int, ...] | None = None
    if depends_on is not None:
        deps = list(depends_on)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in deps):
            raise ValidationError(f"depends_on must be job ids, got {deps!r}")
        wanted_deps = tuple(sorted(set(deps)))
    return Criteria(kind=kind, args=args, queue=queue, priority=priority, metadata=metadata,
                    states=states_of(state), tags=tuple(tags or ()), depends_on=wanted_deps)


def states_of(state: JobState | str | Sequence[JobState | str] | None) -> tuple[JobState, ...]:
    if state is None:
        return WAITING
    raw = [state] if isinstance(state, str | JobState) else list(state)
    try:
        states = tuple(JobState(s) for s in raw)
    except ValueError as exc:
        valid = ", ".join(s.value for s in JobState)
        raise ValidationError(f"unknown state in {raw!r}: use one of {valid}") from exc
    if not states:
        raise ValidationError("state must name at least one state")
    return states


def check_count(count: int | None) -> None:
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise ValidationError(f"count must be a whole number of at least 0, got {count!r}")


def matching(rows: Iterable[JobRow], want: Criteria) -> list[JobRow]:
    return [r for r in rows if r.state in want.states and _matches(want, r)]


def _matches(want: Criteria, row: JobRow) -> bool:
    if want.kind is not None and row.kind != want.kind:
        return False
    return not want.differences(row)


def enqueued_message(
    want: Criteria, count: int | None, found: list[JobRow], rows: Sequence[JobRow]
) -> str:
    """The failure of ``assert_enqueued``: what was wanted, what is there, how it differs."""
    if not found:
        head = f"expected {want.describe(count)}, found none"
    else:
        head = f"expected {want.describe(count)}, found {len(found)}"
    lines = [head]
    if found:  # too many: the ones that matched
        lines.append("matching jobs:")
        lines.extend(_listed(found, want, diff=False))
    lines.extend(_context(want, rows, exclude={r.id for r in found}))
    return "\n".join(lines)


def refuted_message(want: Criteria, found: list[JobRow]) -> str:
    lines = [f"expected {want.describe(None, negated=True)}, found {len(found)}:"]
    lines.extend(_listed(found, want, diff=False))
    return "\n".join(lines)


def _context(want: Criteria, rows: Sequence[JobRow], exclude: set[int]) -> list[str]:
    """The jobs in the states looked at, and the kind's jobs in other states."""
    looked = [r for r in rows if r.state in want.states and r.id not in exclude]
    states = ", ".join(s.value for s in want.states)
    lines: list[str] = []
    if not looked and not exclude:
        lines.append(f"no jobs are enqueued ({states})")
    elif looked:
        lines.append(f"{'other ' if exclude else ''}jobs enqueued ({states}): {len(looked)}")
        lines.extend(_listed(looked, want, diff=True))
    if want.kind is not None:
        elsewhere = [r for r in rows if r.kind == want.kind and r.state not in want.states]
        if elsewhere:
            lines.append(f"jobs of kind {want.kind!r} in other states: {len(elsewhere)}")
            lines.extend(_listed(elsewhere, want, diff=False, cap=SHOWN_ELSEWHERE))
    return lines


def _listed(rows: Sequence[JobRow], want: Criteria, *, diff: bool, cap: int = SHOWN) -> list[str]:
    lines: list[str] = []
    for row in rows[:cap]:
        lines.append(
            f"  #{row.id} {row.kind!r} in {row.queue!r}, {row.state.value}, "
            f"args {_short(row.args)}"
        )
        if diff and (want.kind is None or row.kind == want.kind):
            lines.extend(f"      {d}" for d in want.differences(row))
    if len(rows) > cap:
        lines.append(f"  ... and {len(rows) - cap} more")
    return lines


def _wanted(what: str, expected: Any) -> str:
    if callable(expected) and not isinstance(expected, Mapping) and not _is_plain(expected):
        return f"with {what} matching {_name(expected)}"
    if isinstance(expected, Mapping):
        return f"with {what} containing {_short(expected)}"
    return f"with {what} {_short(expected)}"


def _mismatches(path: str, actual: Any, expected: Any) -> list[str]:
    """How ``actual`` fails to contain ``expected`` (a dict matches as a subset)."""
    if isinstance(expected, Mapping):
        if not isinstance(actual, Mapping):
            return [f"{path} is {_short(actual)}, not a dict"]
        found: list[str] = []
        for key, value in expected.items():
            if key not in actual:
                found.append(f"{path} has no {key!r}")
            else:
                found.extend(_mismatches(f"{path}[{key!r}]", actual[key], value))
        return found
    if callable(expected) and not _is_plain(expected):
        predicate: Callable[[Any], Any] = expected
        try:
            if predicate(actual):
                return []
        except Exception as exc:  # a predicate written for other args: no match, say why
            return [f"{path} {_short(actual)} made {_name(expected)} raise {exc!r}"]
        return [f"{path} {_short(actual)} do not satisfy {_name(expected)}"]
    if expected == actual:  # expected first: unittest.mock.ANY decides
        return []
    return [f"{path} is {_short(actual)}, not {_short(expected)}"]


def _name(fn: Any) -> str:
    return str(getattr(fn, "__name__", None) or repr(fn))


def _is_plain(value: Any) -> bool:
    """Values compared by equality even though callable (classes: ``ANY``'s kin)."""
    return isinstance(value, type)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= REPR_CAP else text[: REPR_CAP - 3] + "..."
