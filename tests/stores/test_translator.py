"""The error boundary every store wraps its calls in (kiln/stores/_translator.py):
what its dialect calls a driver error leaves as kiln's error, raised from the
original; anything else passes through untouched."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from kiln._errors import NotMigratedError, StoreError
from kiln.stores._translator import Translator
from kiln.stores.sqlite._errors import is_driver_error, translate

ERRORS = Translator("'kiln.db'", is_driver_error, translate)


def test_a_driver_error_leaves_as_kiln_error_from_the_original() -> None:
    original = sqlite3.OperationalError("no such table: kiln_jobs")
    with pytest.raises(NotMigratedError, match="kiln migrate") as caught, ERRORS("job_get"):
        raise original
    assert caught.value.operation == "job_get" and caught.value.__cause__ is original
    with pytest.raises(StoreError) as other, ERRORS("jobs_prune"):
        raise OverflowError("Python int too large to convert to SQLite INTEGER")
    assert type(other.value) is StoreError and other.value.operation == "jobs_prune"


@pytest.mark.parametrize("error", [
    StoreError("job_claim", "raised on purpose"), ValueError("a bug"), asyncio.CancelledError(),
])
def test_anything_else_passes_through(error: BaseException) -> None:
    with pytest.raises(type(error)) as caught, ERRORS("job_claim"):
        raise error
    assert caught.value is error and caught.value.__cause__ is None


def test_nothing_raised_is_nothing_translated() -> None:
    with ERRORS("job_get"):
        pass
