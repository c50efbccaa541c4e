"""``kiln queues [pause|resume|concurrency]`` on every store: output, audit, exit codes,
and bad input that writes nothing (run in-process through kiln.cli.run)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from kiln import Client
from kiln._model._controls import QueueControls
from kiln._model._job import ServerInfo
from kiln.cli import EXIT_OK, EXIT_USAGE, run
from kiln.stores import store_from_url


async def _seed(url: str) -> None:
    store = store_from_url(url)
    await store.open()
    await store.migrate()
    await store.server_register(ServerInfo(
        id="srv-1", host="h", pid=1, queues={"mail": 4}, kinds=["email.send"],
        version="test", started_at=datetime.now(UTC)))
    await Client(store).enqueue("email.send", {}, queue="mail")
    await store.close()


async def _read(url: str) -> tuple[QueueControls, list[tuple[str, str]]]:
    store = store_from_url(url)
    await store.open()
    try:
        audit = [(e.actor, e.action) for e in await store.audit_list()]
        return await store.queue_controls(), audit
    finally:
        await store.close()


def test_pause_resume_and_concurrency(store_url: str, capsys: Any) -> None:
    asyncio.run(_seed(store_url))
    db = ["--database-url", store_url]
    assert run(["queues", "pause", "mail", *db]) == EXIT_OK
    assert capsys.readouterr().out == "paused mail\n"
    assert run(["queues", "pause", "mail", *db]) == EXIT_OK
    assert "was paused already" in capsys.readouterr().out
    assert run(["queues", "concurrency", "mail", "2", "--server", "srv-1", *db]) == EXIT_OK
    assert capsys.readouterr().out == "mail: concurrency 2 on server srv-1\n"
    assert run(["queues", *db]) == EXIT_OK
    table = capsys.readouterr().out
    assert "paused" in table and "srv-1=2*" in table and "cli:" in table
    assert run(["queues", "--json", *db]) == EXIT_OK
    [mail] = json.loads(capsys.readouterr().out)
    assert (mail["state"], mail["concurrency"], mail["configured"]) == (
        "paused", {"srv-1": 2}, {"srv-1": 4})
    assert mail["counts"]["available"] == 1 and mail["paused_by"].startswith("cli")
    assert run(["queues", "resume", "mail", *db]) == EXIT_OK
    assert run(["queues", "concurrency", "mail", "reset", "--server", "srv-1", *db]) == EXIT_OK
    controls, audit = asyncio.run(_read(store_url))
    assert controls.pauses == () and controls.limits == ()
    assert [a for _, a in audit] == ["queue_concurrency", "queue_resume", "queue_concurrency",
                                     "queue_pause", "queue_pause"]
    assert all(actor.startswith("cli") for actor, _ in audit)


@pytest.mark.parametrize("args, message", [
    (["pause", "nope"], "unknown queue 'nope'"),
    (["concurrency", "nope", "2"], "unknown queue 'nope'"),
    (["concurrency", "mail", "-1"], "between 0 and 10000"),
    (["concurrency", "mail", "100000"], "between 0 and 10000"),
    (["concurrency", "mail", "two"], "a number or reset"),
    (["concurrency", "mail", "2", "--server", "ghost"], "not registered"),
])
def test_bad_input_exits_2_and_writes_nothing(
    store_url: str, capsys: Any, args: list[str], message: str
) -> None:
    asyncio.run(_seed(store_url))
    assert run(["queues", *args, "--database-url", store_url]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    controls, audit = asyncio.run(_read(store_url))
    assert controls == QueueControls() and audit == []


def test_limit_remove_takes_a_fleet_wide_limit_away_audited(store_url: str, capsys: Any) -> None:
    """``kiln queues limit QUEUE --remove`` (audit M3): the limit goes, the audit says
    who, and a live server that still declares it is named."""
    asyncio.run(_seed(store_url))

    async def declare() -> None:
        store = store_from_url(store_url)
        await store.open()
        try:
            await store.concurrency_declare({"queue:mail": 1}, "srv-1")
        finally:
            await store.close()

    asyncio.run(declare())
    db = ["--database-url", store_url]
    assert run(["queues", "limit", "mail", "--remove", *db]) == EXIT_OK
    printed = capsys.readouterr()
    assert printed.out == "removed the concurrency limit of mail (at most 1 at once)\n"
    assert "still declared by live server(s) srv-1" in printed.err
    assert run(["queues", "limit", "mail", "--remove", *db]) == EXIT_OK
    assert "has no fleet-wide concurrency limit" in capsys.readouterr().out
    _controls, audit = asyncio.run(_read(store_url))
    assert audit == [(audit[0][0], "concurrency_remove")] * 2
    assert audit[0][0].startswith("cli")
    assert run(["queues", "limit", "mail", *db]) == EXIT_USAGE  # --remove is required
    assert "--remove" in capsys.readouterr().err
