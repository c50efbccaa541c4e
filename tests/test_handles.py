"""Typed job handles (issue 43 item 1): ``@app.job`` returns a ``kiln.JobHandle``, still
the function when called, whose ``enqueue`` takes the handler's declared args type (a
TypedDict, a dataclass, a Pydantic model), encoded to JSON at enqueue and rebuilt on
the worker; and a type checker rejects a wrong field, a wrong type and a missing field."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

import kiln
from kiln import testing
from tests.integration.inprocess import Running, all_completed, config, open_store
from tests.support.typecheck import mypy_user_module
from tests.support.waits import wait_for

try:
    from tests.handles_models import Signup  # at module level: a handler's annotation names it
except ImportError:  # no Pydantic here: its tests skip
    Signup = None  # type: ignore[assignment,misc]

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide.md"


class EmailArgs(TypedDict):
    to: str
    attempts: int


@dataclasses.dataclass
class Address:
    city: str
    zip: str


@dataclasses.dataclass
class Invoice:
    number: int
    address: Address
    lines: list[str] = dataclasses.field(default_factory=list)


@pytest.fixture
def app(tmp_path: Path) -> Iterator[kiln.App]:
    app = kiln.App(f"sqlite:///{tmp_path / 'k.db'}")
    app.migrate()
    yield app
    app.close()


def test_a_handle_is_still_the_function(app: kiln.App) -> None:
    @app.job("email.send", queue="mail")
    def send(job: kiln.Job[EmailArgs]) -> str:
        """Send it."""
        return job.args["to"]

    assert isinstance(send, kiln.JobHandle)
    assert send.kind == "email.send" and send.__name__ == "send"
    assert send.__doc__ == "Send it." and send.__wrapped__ is send.fn
    assert app.kinds["email.send"].handler is send.fn  # the server runs the function
    assert app.kinds["email.send"].args_type is EmailArgs
    done = testing.perform(app, "email.send", {"to": "a@example.com", "attempts": 1})
    assert done.value == "a@example.com"
    assert send(done.job) == "a@example.com"  # calling the handle calls the handler
    other = kiln.App(app.url)  # a handle registered elsewhere: its function, not the handle
    assert other.register("copy", send).handler is send.fn
    assert other.register("copy.async", other.job("x")(_async_handler)).is_async
    both = other.job("y")(other.job("z")(send))  # stacked: two kinds, one function
    assert both.fn is send.fn and both.kind == "y" and both.__wrapped__ is send.fn
    assert other.kinds["y"].handler is other.kinds["z"].handler is send.fn


async def _async_handler(job: kiln.Job) -> None:
    return None


def test_typeddict_args_enqueue_through_the_handle_and_arrive_as_given(app: kiln.App) -> None:
    seen: list[Any] = []

    @app.job("email.send", queue="mail")
    def send(job: kiln.Job[EmailArgs]) -> None:
        seen.append(job.args)

    first = send.enqueue({"to": "a@example.com", "attempts": 1}, priority=3)
    many = send.enqueue_many([{"to": "b@example.com", "attempts": 2},
                              {"to": "c@example.com", "attempts": 3}], tags=["bulk"])
    testing.assert_enqueued(app, "email.send", args={"to": "a@example.com", "attempts": 1},
                            queue="mail", priority=3)
    testing.assert_enqueued(app, "email.send", tags=["bulk"], count=2)
    assert len(many) == 2 and first not in many
    assert testing.drain(app).completed == 3
    assert sorted(a["to"] for a in seen) == ["a@example.com", "b@example.com", "c@example.com"]
    assert all(type(a) is dict for a in seen)


async def test_aenqueue_and_aenqueue_many(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path / 'k.db'}")
    await app.amigrate()

    @app.job("invoice.send")
    def send(job: kiln.Job[Invoice]) -> None: ...

    try:
        one = await send.aenqueue(Invoice(1, Address("Oslo", "0150")), delay=60)
        two = await send.aenqueue_many([Invoice(2, Address("Bergen", "5003"), ["a"])])
        client = app.client()
        row = await client.get(one)
        assert row is not None and row.args == {
            "number": 1, "address": {"city": "Oslo", "zip": "0150"}, "lines": []}
        row = await client.get(two[0])
        assert row is not None and row.args["lines"] == ["a"]
    finally:
        await app.aclose()
        app.close()


async def test_dataclass_args_round_trip_through_a_real_server(store_url: str) -> None:
    """Encoded with dataclasses.asdict at enqueue, stored as JSON, rebuilt (nested
    dataclass included) on the worker: on every store, through a running server."""
    app = kiln.App(store_url)
    seen: list[Any] = []

    @app.job("invoice.send")
    async def send(job: kiln.Job[Invoice]) -> int:
        seen.append(job.args)
        return job.args.number

    store = await open_store(store_url)  # migrates
    try:
        ids = [await send.aenqueue(Invoice(7, Address("Oslo", "0150"), ["x", "y"])),
               # a mapping by kind name, checked against Invoice here, rebuilt there
               await app.aenqueue("invoice.send", {"number": 8,
                                                   "address": {"city": "Rome", "zip": "00100"}})]
        row = await store.job_get(ids[0])
        assert row is not None and row.args == {
            "number": 7, "address": {"city": "Oslo", "zip": "0150"}, "lines": ["x", "y"]}
        running = await Running(app.server({"default": 2}, config())).started()
        try:
            await wait_for(lambda: all_completed(store.job_get, ids), 15, "the invoices")
        finally:
            await running.stop()
        assert sorted(seen, key=lambda i: i.number) == [
            Invoice(7, Address("Oslo", "0150"), ["x", "y"]),
            Invoice(8, Address("Rome", "00100"))]
        assert all(isinstance(i.address, Address) for i in seen)
    finally:
        await store.close()
        await app.aclose()
        app.close()


def test_a_mapping_that_does_not_fit_the_dataclass_is_refused_at_enqueue(app: kiln.App) -> None:
    @app.job("invoice.send")
    def send(job: kiln.Job[Invoice]) -> None: ...

    with pytest.raises(kiln.ValidationError, match=r"do not fit Invoice.*numbr"):
        app.enqueue("invoice.send", {"numbr": 1, "address": {"city": "a", "zip": "b"}})
    with pytest.raises(kiln.ValidationError, match=r"do not fit Invoice.*address"):
        app.enqueue("invoice.send", {"number": 1})
    assert testing.enqueued_jobs(app) == []


def test_a_stored_shape_that_does_not_fit_fails_in_the_handler(tmp_path: Path) -> None:
    """A producer without the handler cannot check the shape: reading job.args raises
    in the handler, and the job retries as for any error."""
    url = f"sqlite:///{tmp_path / 'k.db'}"
    worker = kiln.App(url)
    worker.migrate()

    @worker.job("invoice.send")
    def send(job: kiln.Job[Invoice]) -> None:
        job.args  # noqa: B018 - reading it rebuilds it

    producer = kiln.App(url, known_kinds_only=False)
    producer.enqueue("invoice.send", {"numbr": 1})
    drained = testing.drain(worker)
    assert drained.retried == 1 and isinstance(drained.errors[0], TypeError)
    assert "numbr" in str(drained.errors[0])
    producer.close()
    worker.close()


def test_a_bare_job_keeps_the_args_as_given(app: kiln.App) -> None:
    seen: list[Any] = []

    @app.job("plain")
    def plain(job: kiln.Job) -> None:
        seen.append(job.args)

    plain.enqueue({"anything": [1, 2]})
    plain.enqueue([3])
    app.enqueue("plain", Invoice(1, Address("a", "b")))  # a dataclass: as its dict
    assert app.kinds["plain"].args_type is None
    assert testing.drain(app).completed == 3
    assert seen == [{"anything": [1, 2]}, [3],
                    {"number": 1, "address": {"city": "a", "zip": "b"}, "lines": []}]


def test_chain_and_fan_in_steps_take_handles(app: kiln.App) -> None:
    order: list[str] = []

    @app.job("a")
    def a(job: kiln.Job[EmailArgs]) -> None:
        order.append("a" + job.args["to"])

    @app.job("b")
    def b(job: kiln.Job[Invoice]) -> None:
        order.append(f"b{job.args.number}")

    ids = app.enqueue_chain([(a, {"to": "1", "attempts": 0}), ("b", Invoice(2, Address("c", "z")))])
    parts, then = app.enqueue_fan_in([(b, Invoice(3, Address("c", "z")))], (a, {"to": "4",
                                                                                 "attempts": 0}))
    assert len(ids) == 2 and len(parts) == 1 and then
    assert testing.drain(app).completed == 4
    assert order.index("a1") < order.index("b2") and order.index("b3") < order.index("a4")


def test_the_guides_first_block_runs(tmp_path: Path) -> None:
    text = GUIDE.read_text()
    marked = text[text.index("<!-- tested: tests/test_handles.py"):]
    block = re.findall(r"```python\n(.*?)```", marked, re.S)[0]
    url = f"sqlite:///{tmp_path / 'k.db'}"
    kiln.App(url).migrate()
    namespace: dict[str, Any] = {}
    exec(block.replace('"postgresql://postgres@127.0.0.1/test"', repr(url)), namespace)
    app: kiln.App = namespace["app"]
    seen: dict[str, Any] = {}

    async def record(job: kiln.Job, call_next: Any) -> Any:
        seen[job.kind] = job.args
        return await call_next()

    app.use(record)
    assert testing.drain(app).completed == 2
    assert seen["report.build"] == {"month": "2026-11"}
    assert seen["thumbnail"] == namespace["Thumbnail"](image_id=7, width=256)
    app.close()


def test_pydantic_args_are_validated_at_enqueue_and_rebuilt_on_the_worker(
    app: kiln.App,
) -> None:
    if Signup is None:
        pytest.skip("Pydantic is not installed")
    seen: list[Any] = []

    @app.job("signup")
    def signup(job: kiln.Job[Signup]) -> None:
        seen.append(job.args)

    signup.enqueue(Signup(email="a@example.com", age=30))
    app.enqueue("signup", {"email": "b@example.com", "age": "41"})  # validated: coerced
    with pytest.raises(kiln.ValidationError, match=r"(?s)do not fit Signup.*age"):
        app.enqueue("signup", {"email": "c@example.com", "age": "old"})
    with pytest.raises(kiln.ValidationError, match=r"(?s)do not fit Signup.*email"):
        signup.enqueue({"age": 3})  # type: ignore[arg-type]
    assert [j.args for j in testing.enqueued_jobs(app, "signup")] == [
        {"email": "a@example.com", "age": 30, "joined": None},
        {"email": "b@example.com", "age": 41, "joined": None}]
    assert testing.drain(app).completed == 2
    assert seen == [Signup(email="a@example.com", age=30), Signup(email="b@example.com", age=41)]


MYPY_SNIPPET = '''
    import dataclasses
    from typing import TypedDict

    import kiln
    from tests.handles_models import Signup

    app = kiln.App()

    class EmailArgs(TypedDict):
        to: str
        attempts: int

    @dataclasses.dataclass
    class Thumb:
        image_id: int

    @app.job("email.send")
    def send(job: kiln.Job[EmailArgs]) -> None:
        to: str = job.args["to"]

    @app.job("thumb")
    async def thumb(job: kiln.Job[Thumb]) -> int:
        return job.args.image_id

    @app.job("signup")
    def signup(job: kiln.Job[Signup]) -> None: ...

    @app.job("plain")
    def plain(job: kiln.Job) -> None: ...

    async def main() -> None:
        send.enqueue({"to": "a@example.com", "attempts": 1}, priority=2)
        await send.aenqueue({"to": "a@example.com", "attempts": 1})
        send.enqueue_many([{"to": "a@example.com", "attempts": 1}])
        thumb.enqueue(Thumb(image_id=1))
        signup.enqueue(Signup(email="a@example.com", age=3))
        plain.enqueue({"whatever": [1]})
        app.enqueue("email.send", {"anything": 1})
        send.enqueue({"too": "a@example.com", "attempts": 1})
        send.enqueue({"to": "a@example.com", "attempts": "1"})
        send.enqueue({"to": "a@example.com"})
        thumb.enqueue(Thumb(image_id="1"))
        thumb.enqueue({"image_id": 1})
        signup.enqueue(Signup(email="a@example.com", age=[3]))
        await send.aenqueue({"to": 1, "attempts": 1})
        send.enqueue({"to": "a@example.com", "attempts": 1}, priorty=2)
'''


def test_a_type_checker_rejects_a_wrong_field_a_wrong_type_and_a_missing_field(
    tmp_path: Path,
) -> None:
    pytest.importorskip("pydantic")
    user, stdout = mypy_user_module(tmp_path, textwrap.dedent(MYPY_SNIPPET))
    error = re.compile(re.escape(str(user)) + r":(\d+): error:")
    found: dict[int, str] = {}
    for line in stdout.splitlines():
        match = error.match(line)
        if match:
            found.setdefault(int(match[1]), "")
            found[int(match[1])] += line
    source = textwrap.dedent(MYPY_SNIPPET).splitlines()
    first_wrong = next(i for i, text in enumerate(source, 1) if '"too"' in text)
    assert sorted(found) == list(range(first_wrong, first_wrong + 8)), stdout
    wrong_field, wrong_type, missing, dc_type, dc_dict, model_type, async_type, option = (
        found[first_wrong + i] for i in range(8))
    assert '"too"' in wrong_field and '"attempts"' in wrong_type and '"attempts"' in missing
    assert '"Thumb"' in dc_type and '"Thumb"' in dc_dict and '"Signup"' in model_type
    assert '"to"' in async_type and '"priorty"' in option


def test_an_args_type_that_cannot_be_resolved_leaves_the_args_as_json(app: kiln.App) -> None:
    """docs/guide.md, "Typed args": under ``from __future__ import annotations`` (as in
    this module) a type defined inside a function cannot be resolved at registration."""

    @dataclasses.dataclass
    class Local:
        n: int

    seen: list[Any] = []

    @app.job("local")
    def local(job: kiln.Job[Local]) -> None:
        seen.append(job.args)

    assert app.kinds["local"].args_type is None
    local.enqueue(Local(3))  # still encoded as its dict at enqueue
    assert testing.drain(app).completed == 1
    assert seen == [{"n": 3}]
