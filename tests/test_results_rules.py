"""Stored results without a database: the rules a result meets before it is written
(kiln._model._results), where max_result_bytes is configured, and the completer's bound on
the stored results of one batch."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import pytest

import kiln
from kiln._events import EventHub
from kiln._model._job import JobResult, Outcome
from kiln._model._results import DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_BYTES_LIMIT, encoded
from kiln._server._completer import BATCH_RESULT_CHARS, Completer
from kiln.stores._protocol import ApplyResult


def test_a_result_is_compact_json() -> None:
    assert encoded({"a": [1, 2.5, None, True]}, 100, 1, "k") == '{"a":[1,2.5,null,true]}'
    assert encoded("ü", 4, 1, "k") == '"ü"'  # 4 bytes: quotes and a two-byte character
    assert encoded((1, 2), 100, 1, "k") == "[1,2]"  # a tuple is a JSON array


@pytest.mark.parametrize(("value", "says"), [
    (object(), "it is not JSON (TypeError: Object of type object is not JSON serializable)"),
    ({1j: 1}, "it is not JSON (TypeError: keys must be str"),
    (math.nan, "it is not JSON (ValueError: Out of range float values"),
    ("a\x00b", "it contains a NUL character (U+0000)"),
    ({"k\x00": 1}, "it contains a NUL character (U+0000)"),
    ("\ud800", "it contains '\\ud800', a lone surrogate"),
])
def test_a_result_that_cannot_be_stored_says_why(value: Any, says: str) -> None:
    with pytest.raises(kiln.ResultError) as raised:
        encoded(value, DEFAULT_MAX_RESULT_BYTES, 42, "report.build")
    message = str(raised.value)
    assert message.startswith("the result of job 42 (kind 'report.build') cannot be stored: ")
    assert says in message
    assert raised.value.job_id == 42 and raised.value.kind == "report.build"


def test_a_circular_result_says_why() -> None:
    value: list[Any] = []
    value.append(value)
    with pytest.raises(kiln.ResultError, match="Circular reference detected"):
        encoded(value, 100, 1, "k")


def test_a_backslash_u0000_in_text_is_not_a_nul() -> None:
    assert encoded("\\u0000", 100, 1, "k") == '"\\\\u0000"'


def test_the_limit_counts_utf8_bytes() -> None:
    assert encoded("é" * 49, 100, 1, "k")  # 98 + 2 quotes = 100 bytes
    with pytest.raises(kiln.ResultError, match=r"it is 102 bytes as JSON, over max_result_bytes"
                                               r" \(100\)"):
        encoded("é" * 50, 100, 1, "k")


def test_max_result_bytes_is_checked_where_it_is_configured() -> None:
    assert kiln.ServerConfig().max_result_bytes == 64 * 1024
    assert kiln.ServerConfig(max_result_bytes=10).max_result_bytes == 10
    for bad in (0, -1, True, 1.5, MAX_RESULT_BYTES_LIMIT + 1):
        with pytest.raises(kiln.ConfigError, match="max_result_bytes"):
            kiln.ServerConfig(max_result_bytes=bad)  # type: ignore[arg-type]
    app = kiln.App("sqlite:///:memory:")
    with pytest.raises(kiln.ConfigError, match="whole number of bytes from 1 to 4,194,304"):
        app.register("k", lambda job: None, max_result_bytes=0)
    assert app.register("k", lambda job: None, max_result_bytes=5).max_result_bytes == 5
    app.close()


class Recording:
    """A store that applies every result and records each batch's stored characters."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int]] = []  # (results, characters of stored results)

    async def job_results_apply(self, results: Sequence[JobResult]) -> ApplyResult:
        chars = sum(len(r.result) for r in results if r.result is not None)
        self.batches.append((len(results), chars))
        ids = frozenset(r.job_id for r in results)
        return ApplyResult(applied=len(ids), released={}, applied_ids=ids)


async def test_a_batch_stops_at_its_stored_results_bound() -> None:
    store = Recording()
    completer = Completer(store=store, config=kiln.ServerConfig(), events=EventHub(),  # type: ignore[arg-type]
                          on_released=lambda released, reason: None)
    big = '"' + "x" * (BATCH_RESULT_CHARS // 3) + '"'
    for i in range(10):
        stored = big if i % 2 == 0 else None
        completer.push(JobResult(i, "s1", 1, Outcome.COMPLETED, result=stored))
    completer.push(JobResult(99, "s1", 1, Outcome.COMPLETED, result='"' + "y" * 2 ** 23 + '"'))
    await completer.start()
    try:
        async with asyncio.timeout(5):
            while completer.pending:
                await asyncio.sleep(0.01)
    finally:
        await completer.stop()
    assert sum(n for n, _ in store.batches) == 11 and completer.written == 11
    assert all(chars <= BATCH_RESULT_CHARS for n, chars in store.batches if n > 1)
    assert store.batches[-1] == (1, 2 ** 23 + 2)  # one result over the bound goes alone
    assert completer._result_chars == 0


def test_results_of_none_take_the_statements_without_a_result_column() -> None:
    """What "costs nothing" rests on: a batch without stored results runs the very
    statements it ran before stored results existed, on every store."""
    from kiln.stores.mysql import _jobs as mysql
    from kiln.stores.postgres import _jobs as postgres
    from kiln.stores.sqlite import _jobs as sqlite

    plain = [JobResult(i, "s1", 1, Outcome.COMPLETED) for i in range(3)]
    stmt = postgres._results_stmt(plain, False)
    assert stmt.sql == postgres.RESULTS_APPLY and "result" not in stmt.sql
    assert "result" not in " ".join(s.sql for s in mysql._completions(plain))
    assert "result" not in sqlite.RESULTS_APPLY
    one = [plain[0], JobResult(9, "s1", 1, Outcome.COMPLETED, result="[1]")]
    assert postgres._results_stmt(one, False).sql == postgres.RESULTS_APPLY_STORED
    assert "result = CASE id WHEN" in mysql._completions(one)[1].sql
