"""enqueue_many's batch path (kiln._client._batch): the same jobs as one enqueue at a time
would make, every check kept, args encoded once; and a single enqueue is one
statement (its own transaction) on PostgreSQL."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kiln
from kiln import JobFilter
from kiln._client._batch import build_all
from kiln._model._job import NewJob
from kiln.stores.postgres._limiter import NotifyLimiter

UNIQUE = kiln.Unique(by=("args.n",))


def make_app(url: str) -> kiln.App:
    app = kiln.App(url)
    app.register("mail.send", lambda job: None, queue="mail", max_attempts=7, priority=3,
                 timeout=9.5, tags=["mail"])
    app.register("rated", lambda job: None, rate_limit=kiln.RateLimit(5, 1.0))
    app.register("once", lambda job: None, queue="u", unique=UNIQUE)
    return app


@pytest.fixture
def app(store_url: str) -> Iterator[kiln.App]:
    app = make_app(store_url)
    app.migrate()
    yield app
    app.close()


def fields(job: NewJob) -> dict[str, Any]:
    out = dataclasses.asdict(job)
    out.pop("args_json")
    return out


ITEMS: list[Any] = [
    ("mail.send", {"to": "a@example.com"}),
    ("mail.send", None),
    ("rated", {"n": 1}),
    ("once", {"n": "x", "é": [1.5, None, True]}),
    ("once", {"n": 2}),
    ("mail.send", {"n": 3}, {"priority": 9, "delay": 5, "metadata": {"m": 1}}),
    ("once", {"n": 6}, {"tags": ["t1", "t2"]}),
    ("once", {"n": 4}, {}),
    ["mail.send", {"n": 5}],
]


def test_the_batch_path_builds_what_single_enqueues_build(tmp_path: Path) -> None:
    app = make_app(f"sqlite:///{tmp_path / 'k.db'}")
    client = app.sync_client()
    batch = build_all(client, ITEMS)
    one_by_one = [client.build(item[0], item[1], **(item[2] if len(item) > 2 else {}))
                  for item in ITEMS]
    assert [fields(j) for j in batch] == [fields(j) for j in one_by_one]
    assert batch[3].unique_key == UNIQUE.key_of("once", "u", ITEMS[3][1])
    assert batch[0].args_json == '{"to":"a@example.com"}' and batch[1].args_json == "{}"


BAD: list[tuple[Any, type[Exception], str]] = [
    (("mail.send", {"when": object()}), kiln.ValidationError, "args must be JSON-serialisable"),
    (("mail.send", {"x": float("nan")}), kiln.ValidationError, "args must be JSON-serialisable"),
    (("mail.send", {(1, 2): 3}), kiln.ValidationError, "args must be JSON-serialisable"),
    (("", {}), kiln.ValidationError, "kind must be a non-empty string"),
    ((3, {}), kiln.ValidationError, "kind must be a non-empty string"),
    (("no.such.kind", {}), kiln.UnknownKindError, "unknown job kind 'no.such.kind'"),
    (("once", {"m": 1}), kiln.ValidationError, "args have no top-level key 'n'"),
    (("mail.send", {}, {"colour": "red"}), kiln.ValidationError, "unknown enqueue option"),
    (("mail.send", {}, {"queue": ""}), kiln.ValidationError, "queue must be a non-empty"),
]


@pytest.mark.parametrize(("item", "error", "message"), BAD)
async def test_one_bad_job_refuses_the_batch_and_writes_nothing(
    app: kiln.App, item: Any, error: type[Exception], message: str
) -> None:
    items = [("mail.send", {"n": i}) for i in range(5)] + [item]
    with pytest.raises(error) as info:
        app.enqueue_many(items)
    assert message in str(info.value)
    with pytest.raises(error):
        await app.aenqueue_many(items)
    assert await app.client().count(JobFilter()) == 0
    await app.aclose()


def test_a_circular_args_value_is_a_clear_error(app: kiln.App) -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    with pytest.raises(kiln.ValidationError, match="circular reference"):
        app.enqueue_many([("mail.send", loop)])


async def test_batches_store_each_jobs_args_and_options_in_order(app: kiln.App) -> None:
    sync_ids = app.enqueue_many([("mail.send", {"n": i, "s": "é\n"}) for i in range(300)])
    async_ids = await app.aenqueue_many([*ITEMS[:3], ("once", {"n": "y"}), *ITEMS[5:6]])
    assert len(set(sync_ids)) == 300 and all(r.inserted for r in sync_ids)
    assert list(sync_ids) == sorted(sync_ids)
    client = app.client()
    for i in (0, 150, 299):
        row = await client.get(sync_ids[i])
        assert row is not None and row.args == {"n": i, "s": "é\n"}
        assert (row.queue, row.priority, row.max_attempts, row.timeout) == ("mail", 3, 7, 9.5)
        assert row.tags == ["mail"]
    rows = [await client.get(i) for i in async_ids]
    assert [r.args if r else None for r in rows] == [
        {"to": "a@example.com"}, {}, {"n": 1}, {"n": "y"}, {"n": 3}]
    assert rows[2] is not None and rows[2].state is kiln.JobState.PENDING  # rate limited
    assert rows[4] is not None and rows[4].metadata == {"m": 1}
    assert rows[4].state is kiln.JobState.SCHEDULED and rows[4].priority == 9
    again = await app.aenqueue_many([("once", {"n": "y"}), ("once", {"n": "z"})])
    assert [r.inserted for r in again] == [False, True] and again[0] == async_ids[3]
    await app.aclose()


async def test_a_hook_that_changes_args_is_stored_as_changed(app: kiln.App) -> None:
    def hook(job: NewJob) -> None:
        job.args = {**job.args, "hooked": True}

    app.enqueue_hooks.append(hook)
    ids = await app.aenqueue_many([("mail.send", {"n": i}) for i in range(3)])
    row = await app.client().get(ids[1])
    assert row is not None and row.args == {"n": 1, "hooked": True}
    await app.aclose()


async def test_a_single_enqueue_is_one_statement_on_postgres(
    app: kiln.App, backend: str
) -> None:
    if backend != "postgresql":
        pytest.skip("counts PostgreSQL statements")
    await app.aenqueue("mail.send", {"n": 0})  # opens the pool
    store = app.client()._store
    # the quiet inserts' owed wake-up is a statement of its own, sent when the window
    # ends: an hour's window puts it after the count (on a loaded machine the default
    # 10 ms one ended inside it)
    store._limiter = NotifyLimiter(3600)  # type: ignore[attr-defined]
    before = store.query_count()
    await app.aenqueue("mail.send", {"n": 1})
    await app.aenqueue_many([("mail.send", {"n": i}) for i in range(100)])
    assert store.query_count() - before == 2
    sync_store = app._sync_store
    sync_store._limiter = NotifyLimiter(3600)  # type: ignore[attr-defined]
    app.enqueue("mail.send", {"n": 2})
    before = sync_store.query_count()
    app.enqueue("mail.send", {"n": 3})
    assert sync_store.query_count() - before == 1
    await app.aclose()


def test_sqlite_batch_in_the_callers_transaction(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    app = make_app(url)
    app.migrate()
    first = app.enqueue("mail.send", {"n": -1})
    conn = sqlite3.connect(tmp_path / "k.db", isolation_level=None)
    conn.execute("BEGIN")
    ids = app.enqueue_many([("mail.send", {"n": i}) for i in range(50)], conn=conn)
    got = conn.execute("SELECT id, args FROM kiln_jobs WHERE id > ? ORDER BY id", (first,))
    assert [(i, f'{{"n":{n}}}') for n, i in enumerate(ids)] == got.fetchall()
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM kiln_jobs").fetchone()[0] == 1
    conn.close()
    app.close()


KEYED_ARGS: list[Any] = [
    {"n": "plain"}, {"n": 'é"\\\u2028\n'}, {"n": 7}, {"n": 10**30}, {"n": 2.5},
    {"n": True}, {"n": None}, {"n": [1, {"a": "ü"}]}, {"n": {"z": 1, "a": 2}}, {"n": ""},
]


@pytest.mark.parametrize("unique", [
    kiln.Unique(by=("args.n",)), kiln.Unique(by=("args.n",), period=60),
    kiln.Unique(by=("args.n", "queue")), kiln.Unique(), kiln.Unique(key="k"),
], ids=["arg", "arg-period", "arg-queue", "args", "key"])
@pytest.mark.parametrize("args", KEYED_ARGS)
def test_the_batch_keyer_gives_key_of_keys(unique: kiln.Unique, args: Any) -> None:
    assert unique.keyer("k", "q")(args) == unique.key_of("k", "q", args)


def test_keys_of_stored_jobs_do_not_change() -> None:
    """A new key for the same job would let a duplicate of a stored job in."""
    by_n = kiln.Unique(by=("args.n",))
    assert by_n.keyer("k", "q")({"n": 'é"x'}) == "9cbf86745b65a7303b26b94c64b20780566a2690"
    per = kiln.Unique(by=("args.n",), period=60)
    assert per.keyer("k", "q")({"n": 3}) == "a3f75a92f720c56e135923a57da7419a344343f6"


@pytest.mark.parametrize("args", [{}, {"m": 1}, [], None, "n", [1, 2]])
def test_the_batch_keyer_refuses_args_without_the_key(args: Any) -> None:
    with pytest.raises(kiln.ValidationError, match="args have no top-level key 'n'"):
        kiln.Unique(by=("args.n",)).keyer("k", "q")(args)
