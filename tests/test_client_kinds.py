"""Client-side typed kinds (issue 43): a service that holds only a ``kiln.Client`` (no
handlers) declares ``kiln.kind("email.send", EmailArgs)`` and enqueues through it with
its args checked by a type checker, as a ``JobHandle``'s are; a mapping given for a
dataclass is checked at enqueue; a JobKind goes wherever a kind's name goes."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

import kiln
from tests.support.docblocks import blocks_under_test
from tests.support.typecheck import mypy_user_module


class EmailArgs(TypedDict):
    to: str
    attempts: int


@dataclasses.dataclass
class Thumb:
    image_id: int


SEND = kiln.kind("email.send", EmailArgs)
THUMB = kiln.kind("thumb", Thumb)


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    with kiln.App(url) as app:
        app.migrate()
    yield url


async def test_a_client_without_handlers_enqueues_through_a_kind(url: str) -> None:
    client = kiln.Client.from_url(url)
    await client.open()
    try:
        first = await SEND.aenqueue(client, {"to": "a@example.com", "attempts": 1}, queue="mail")
        second = await THUMB.aenqueue(client, Thumb(image_id=7))
        third = await client.enqueue(THUMB, {"image_id": 8})  # a mapping: checked, stored
        many = await SEND.aenqueue_many(client, [{"to": "b", "attempts": 2}] * 2, priority=3)
        chain = await client.enqueue_chain([(SEND, {"to": "c", "attempts": 0}), ("other", {})])
        ids = [first, second, third, *many, *chain]
        rows = {row.id: row for row in [await client.get(i) for i in ids] if row is not None}
    finally:
        await client.close()
    assert sorted(rows) == sorted(ids)
    assert rows[first].kind == "email.send" and rows[first].queue == "mail"
    assert rows[first].args == {"to": "a@example.com", "attempts": 1}
    assert [rows[i].args for i in (second, third)] == [{"image_id": 7}, {"image_id": 8}]
    assert {rows[i].priority for i in many} == {3}
    assert [rows[i].kind for i in chain] == ["email.send", "other"]


async def test_a_mapping_that_does_not_fit_the_kinds_dataclass_is_refused(url: str) -> None:
    client = kiln.Client.from_url(url)
    await client.open()
    try:
        with pytest.raises(kiln.ValidationError, match="do not fit Thumb"):
            await client.enqueue(THUMB, {"image": 8})
        assert await client.count(kiln.filter_of()) == 0
    finally:
        await client.close()


def test_a_kind_enqueues_from_sync_code_through_an_app_or_a_sync_client(url: str) -> None:
    with kiln.App(url, known_kinds_only=False) as app:
        a = SEND.enqueue(app, {"to": "a", "attempts": 1})
        b = SEND.enqueue(app.sync_client(), {"to": "b", "attempts": 1})
        c, d = THUMB.enqueue_many(app, [Thumb(1), Thumb(2)])
        e = app.enqueue(SEND, {"to": "e", "attempts": 1})
        assert [int(x) for x in (a, b, c, d, e)] == [1, 2, 3, 4, 5]
    assert repr(SEND) == "<JobKind 'email.send' EmailArgs>"
    with pytest.raises(kiln.ValidationError, match="kind"):
        kiln.kind("", EmailArgs)


async def test_the_guides_block_runs_on_every_store(store_url: str) -> None:
    """docs/guide.md, "A typed kind without its handler", as written."""
    app = kiln.App(store_url)
    await app.amigrate()
    [code] = blocks_under_test("guide.md", __file__)[:1]
    namespace: dict[str, Any] = {"kiln": kiln, "url": store_url, "TypedDict": TypedDict}
    exec(f"async def _block():\n{textwrap.indent(code, '    ')}\n    return locals()",
         namespace)
    seen: dict[str, Any] = await namespace["_block"]()
    client = app.client()
    try:
        rows = [await client.get(i) for i in [seen["job_id"], *seen["ids"], *seen["chain"]]]
    finally:
        await app.aclose()
    assert [(r.kind, r.args.get("to")) for r in rows if r is not None] == [
        ("email.send", "a@example.com"), ("email.send", "b@example.com"),
        ("email.send", "c@example.com"), ("email.audit", None)]
    assert rows[3] is not None and rows[3].depends_on == [seen["chain"][0]]


MYPY_SNIPPET = '''
    import dataclasses
    from typing import TypedDict

    import kiln

    class EmailArgs(TypedDict):
        to: str
        attempts: int

    @dataclasses.dataclass
    class Thumb:
        image_id: int

    send = kiln.kind("email.send", EmailArgs)
    thumb = kiln.kind("thumb", Thumb)

    async def main(client: kiln.Client, app: kiln.App) -> None:
        await send.aenqueue(client, {"to": "a@example.com", "attempts": 1}, priority=2)
        send.enqueue(app, {"to": "a@example.com", "attempts": 1})
        send.enqueue(client, {"to": "a@example.com", "attempts": 1})
        await thumb.aenqueue(app, Thumb(image_id=1))
        await thumb.aenqueue_many(client, [Thumb(image_id=1)])
        await client.enqueue(send, {"anything": 1})  # by name or ref: not checked
        ids: list[kiln.EnqueueResult] = await client.enqueue_chain([(send, {}), ("x", {})])
        await send.aenqueue(client, {"too": "a@example.com", "attempts": 1})
        await send.aenqueue(client, {"to": "a@example.com", "attempts": "1"})
        await send.aenqueue(client, {"to": "a@example.com"})
        await thumb.aenqueue(client, Thumb(image_id="1"))
        await thumb.aenqueue(client, {"image_id": 1})
        await send.aenqueue("client", {"to": "a@example.com", "attempts": 1})
        await send.aenqueue(client, {"to": "a@example.com", "attempts": 1}, priorty=2)
'''


def test_a_type_checker_checks_a_kinds_args(tmp_path: Path) -> None:
    user, stdout = mypy_user_module(tmp_path, textwrap.dedent(MYPY_SNIPPET))
    error = re.compile(re.escape(str(user)) + r":(\d+): error:")
    found: dict[int, str] = {}
    for line in stdout.splitlines():
        match = error.match(line)
        if match:
            found[int(match[1])] = found.get(int(match[1]), "") + line
    source = textwrap.dedent(MYPY_SNIPPET).splitlines()
    first_wrong = next(i for i, text in enumerate(source, 1) if '"too"' in text)
    assert sorted(found) == list(range(first_wrong, first_wrong + 7)), stdout
    field, type_, missing, dc_type, dc_dict, target, option = (
        found[first_wrong + i] for i in range(7))
    assert '"too"' in field and '"attempts"' in type_ and '"attempts"' in missing
    assert '"Thumb"' in dc_type and '"Thumb"' in dc_dict and '"str"' in target
    assert '"priorty"' in option
