"""Queue, kind and rate-key names are checked at enqueue by every producer (issue 21,
defect 10), and the CLI never prints control characters from job data raw.

The rule (kiln._model._validate.NAME_RULE): 1 to 200 characters, no control or format
characters (NUL, ESC, newlines, bidi overrides, zero-width), no line separators, no
leading or trailing whitespace.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

import kiln
from kiln import Client, ValidationError
from kiln._model._job import AttemptError, JobFilter, JobResult, NewJob, Outcome
from kiln._model._recurring import Recurring
from kiln.stores import Store, store_from_url
from tests.support.cli import assert_fails, count_jobs, ok, run_cli

BAD = [
    ("mail\x00", "U+0000"),
    ("uni.\u202eexe.txt", "RIGHT-TO-LEFT OVERRIDE"),
    ("mail\x1b[2J", "U+001B"),
    ("two\nlines", "U+000A"),
    ("zero\u200bwidth", "ZERO WIDTH SPACE"),
    ("para\u2029graph", "PARAGRAPH SEPARATOR"),
    (" mail", "starts or ends with whitespace"),
    ("mail\t", "starts or ends with whitespace"),
    ("x" * 201, "the limit is 200"),
    ("", "non-empty"),
]
GOOD = ["email.send", "mail-ä", "reports v2", "x" * 200, "日本語のキュー", "a\u00a0b"]


@pytest.mark.parametrize(("name", "why"), BAD)
async def test_every_producer_refuses_a_bad_name_and_writes_nothing(
    store: Store, name: str, why: str
) -> None:
    client = Client(store)
    calls: list[tuple[str, Callable[[], Awaitable[object]]]] = [
        ("kind", lambda: client.enqueue(name, {})),
        ("queue", lambda: client.enqueue("k", {}, queue=name)),
        ("rate_key", lambda: client.enqueue("k", {}, rate_key=name)),
        ("kind", lambda: client.enqueue_many([NewJob(kind=name, args={})])),
        ("queue", lambda: client.enqueue_many([NewJob(kind="k", args={}, queue=name)])),
    ]
    for what, call in calls:
        with pytest.raises(ValidationError, match=re.escape(why)) as info:
            await call()
        assert str(info.value).startswith(what), str(info.value)  # names the field
    with pytest.raises(ValidationError, match=re.escape(why)):
        client.enqueue_many_sync([NewJob(kind="k", args={}, queue=name)])
    assert await store.job_count(JobFilter()) == 0


@pytest.mark.parametrize(("name", "why"), BAD[:3])
def test_declarations_refuse_a_bad_name(name: str, why: str) -> None:
    app = kiln.App("sqlite:///never-opened.db")
    with pytest.raises(ValidationError, match=re.escape(why)):
        app.job(name)(lambda job: None)
    with pytest.raises(ValidationError, match=re.escape(why)):
        app.job("k", queue=name)(lambda job: None)
    with pytest.raises(ValidationError, match=re.escape(why)):
        Recurring(name="r", kind=name, args={}, every=timedelta(seconds=5))
    with pytest.raises(ValidationError, match=re.escape(why)):
        Recurring(name="r", kind="k", args={}, every=timedelta(seconds=5),
                  options={"queue": name})


async def test_good_names_are_accepted(store: Store) -> None:
    client = Client(store)
    for name in GOOD:
        job_id = await client.enqueue(name, {}, queue=name)
        row = await client.get(job_id)
        assert row is not None and (row.kind, row.queue) == (name, name)


def test_cli_enqueue_refuses_a_bad_name(store_url: str) -> None:
    ok(run_cli("migrate", "--database-url", store_url))
    for argv, why in [(["mail\x1b[2J"], "U+001B"), (["k", "--queue", "uni.\u202eexe"],
                                                     "RIGHT-TO-LEFT OVERRIDE"),
                      (["k", "--queue", "mail "], "whitespace")]:
        line = assert_fails(run_cli("--database-url", store_url, "enqueue", *argv), 2, why)
        assert "\x1b" not in line and "\u202e" not in line  # the error escapes it too
    assert count_jobs(store_url) == 0


async def _hostile_jobs(url: str) -> list[int]:
    """Jobs written before names were checked (straight into the store), with an error
    and a server id that carry terminal escapes."""
    store = store_from_url(url)
    await store.open()
    try:
        ids = await store.job_insert_many([
            NewJob(kind="evil\x1b[2J", args={"a": "\x1b]0;owned\x07"}, queue="q\u202eexe"),
        ])
        [row] = await store.job_claim("q\u202eexe", ["evil\x1b[2J"], 1, "srv\x1b[1m")
        error = AttemptError(1, 0.0, "boom \x1b[31mRED\x1b[0m\rover", "tb \x1b[5m\n", "srv")
        await store.job_results_apply([JobResult(
            job_id=row.id, server_id="srv\x1b[1m", attempt=row.attempt, outcome=Outcome.FAILED,
            error=error,
        )])
        return ids
    finally:
        await store.close()


def test_cli_tables_escape_control_characters(store_url: str) -> None:
    ok(run_cli("migrate", "--database-url", store_url))
    [job_id] = asyncio.run(_hostile_jobs(store_url))
    listing = ok(run_cli("--database-url", store_url, "jobs", "list"))
    shown = ok(run_cli("--database-url", store_url, "jobs", "show", str(job_id)))
    for out in (listing, shown):
        assert "\x1b" not in out and "\u202e" not in out and "\r" not in out and "\x07" not in out
        assert "evil\\x1b[2J" in out and "q\\u202eexe" in out
    assert "RED\\x1b[0m" in listing and "\\x1b[31mRED" in shown
    data = json.loads(ok(run_cli("--database-url", store_url, "jobs", "list", "--json")))
    assert data[0]["kind"] == "evil\x1b[2J"  # JSON keeps the data, escaped by the encoder
