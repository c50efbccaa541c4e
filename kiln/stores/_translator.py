"""The boundary where a driver's errors become kiln's, shared by every store.

A store wraps each database call in ``with self._errors(operation):``. An exception
that the dialect calls its driver's leaves the block as the kiln error the dialect
maps it to (NotMigratedError, UnreachableError or StoreError, naming the operation),
raised ``from`` the original so the driver's detail stays on ``__cause__``. Anything
else (a kiln error raised on purpose, a cancellation, a bug) passes through untouched.

Owns when and how a translated error is raised; each dialect's ``_errors`` module owns
which exceptions are its driver's and what each one becomes. Owns too the store's
record of operations that keep failing (``failures``): an operation's streak starts
at its first failure and ends at its next success, which is what ``Server.healthy()``
reads to say the store is failing, whatever the cause.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from types import TracebackType

from kiln._errors import StoreError

# (operation, where the database is, the driver's exception) -> kiln's error
Translate = Callable[[str, str, BaseException], StoreError]


@dataclasses.dataclass(slots=True)
class StoreFailure:
    """An operation failing since ``since`` (time.monotonic()) with no success since;
    ``error`` is its latest error, ``at`` when it came, ``count`` how many failed."""

    operation: str
    since: float
    at: float
    error: str
    count: int = 1


class Translator:
    """One store's boundary: ``where`` names its database in messages (never a
    password); ``catches`` picks the driver's exceptions; ``translate`` maps them."""

    __slots__ = ("catches", "failing", "translate", "where")

    def __init__(
        self, where: str, catches: Callable[[BaseException], bool], translate: Translate
    ) -> None:
        self.where = where
        self.catches = catches
        self.translate = translate
        self.failing: dict[str, StoreFailure] = {}  # by operation, until it succeeds

    def failures(self) -> list[StoreFailure]:
        """The operations whose latest call failed, oldest streak first."""
        return sorted(self.failing.values(), key=lambda f: f.since)

    def failed(self, operation: str, error: BaseException) -> None:
        now = time.monotonic()
        failure = self.failing.get(operation)
        if failure is None:
            self.failing[operation] = StoreFailure(operation, now, now, str(error))
        else:
            failure.at, failure.error, failure.count = now, str(error), failure.count + 1

    def __call__(self, operation: str) -> Translating:
        return Translating(self, operation)

    def error(self, operation: str, exc: BaseException) -> StoreError:
        """kiln's error for ``exc``, to be raised ``from`` it."""
        return self.translate(operation, self.where, exc)


class Translating:
    """The context manager of one operation (a class: cheaper than a generator on the
    hot paths, and its ``__exit__`` never swallows)."""

    __slots__ = ("_operation", "_translator")

    def __init__(self, translator: Translator, operation: str) -> None:
        self._translator = translator
        self._operation = operation

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        translator = self._translator
        if exc is None:
            if translator.failing:  # the streak ends (a dict lookup only while failing)
                translator.failing.pop(self._operation, None)
            return
        if isinstance(exc, Exception) and translator.catches(exc):
            error = translator.error(self._operation, exc)
            translator.failed(self._operation, error)
            raise error from exc
        if isinstance(exc, StoreError):  # raised on purpose: a store error all the same
            translator.failed(self._operation, exc)
