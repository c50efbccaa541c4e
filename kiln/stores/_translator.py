"""The boundary where a driver's errors become kiln's, shared by every store.

A store wraps each database call in ``with self._errors(operation):``. An exception
that the dialect calls its driver's leaves the block as the kiln error the dialect
maps it to (NotMigratedError, UnreachableError or StoreError, naming the operation),
raised ``from`` the original so the driver's detail stays on ``__cause__``. Anything
else (a kiln error raised on purpose, a cancellation, a bug) passes through untouched.

Owns when and how a translated error is raised; each dialect's ``_errors`` module owns
which exceptions are its driver's and what each one becomes.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from kiln._errors import StoreError

# (operation, where the database is, the driver's exception) -> kiln's error
Translate = Callable[[str, str, BaseException], StoreError]


class Translator:
    """One store's boundary: ``where`` names its database in messages (never a
    password); ``catches`` picks the driver's exceptions; ``translate`` maps them."""

    __slots__ = ("catches", "translate", "where")

    def __init__(
        self, where: str, catches: Callable[[BaseException], bool], translate: Translate
    ) -> None:
        self.where = where
        self.catches = catches
        self.translate = translate

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
        if isinstance(exc, Exception) and self._translator.catches(exc):
            raise self._translator.error(self._operation, exc) from exc
