"""``kiln kinds`` names the jobs no live server handles (issue 39 item 9): after the
declarations, one line per queue and kind, "undeclared" when no server ever published
the kind; the same in ``--json``. On every store, run in-process through kiln.cli.run."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from kiln import Client
from kiln._model._job import ServerInfo
from kiln._model._kinds import make_kind
from kiln.cli import EXIT_OK, run
from kiln.stores import store_from_url


async def _seed(url: str, publish: bool) -> None:
    store = store_from_url(url)
    await store.open()
    await store.migrate()
    try:
        await store.server_register(ServerInfo(
            id="srv-1", host="h", pid=1, queues={"mail": 4}, kinds=["t.mail"],
            version="test", started_at=datetime.now(UTC)))
        if publish:
            mail = make_kind("t.mail", lambda job: None, queue="mail")
            await store.kinds_publish("srv-1", "h", 1, [mail.declaration()])
        producer = Client(store)
        for _ in range(3):
            await producer.enqueue("t.new", {})  # no server declares it
        await producer.enqueue("t.mail", {}, queue="default")  # not where srv-1 serves it
        await producer.enqueue("t.mail", {}, queue="mail")  # handled
    finally:
        await store.close()


def test_kinds_lists_the_jobs_no_live_server_handles(store_url: str, capsys: Any) -> None:
    asyncio.run(_seed(store_url, publish=True))
    assert run(["kinds", "--database-url", store_url]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2:] == [
        "t.mail: 1 job waiting in queue default, where no live server handles this kind",
        "t.new: undeclared: 3 jobs waiting in queue default, no live server handles this"
        " kind (they follow its declaration once a server of it starts)",
    ]
    assert run(["kinds", "--json", "--database-url", store_url]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["unhandled"] == [
        {"queue": "default", "kind": "t.mail", "jobs": 1, "declared": True},
        {"queue": "default", "kind": "t.new", "jobs": 3, "declared": False},
    ]


def test_kinds_lists_them_when_no_kind_is_published(store_url: str, capsys: Any) -> None:
    asyncio.run(_seed(store_url, publish=False))
    assert run(["kinds", "--database-url", store_url]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("no kinds published")
    assert "t.new: undeclared: 3 jobs waiting in queue default" in out
    assert "t.mail: undeclared: 1 job waiting in queue default" in out
