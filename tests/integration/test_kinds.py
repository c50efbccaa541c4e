"""A kind's declaration holds however its jobs are enqueued (issue 14, part 1).

The producers here hold no handler: the ``kiln`` CLI, and a handler-less ``kiln.App``
in a process of its own. The workers (tests.integration.kinds_app) serve every kind
on queue ``mail`` with max_attempts=3 or a rate limit; before kinds were published
those producers enqueued into ``default`` with 25 attempts and no admission.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

import kiln
from kiln import JobRow
from tests.plugins.workers import ROOT, Admin, StartWorker, worker_starter
from tests.support.cli import cli_env, ok, run_cli
from tests.support.config import FAST
from tests.support.waits import wait_for, wait_for_sync

APP = "tests.integration.kinds_app:app"


@pytest.fixture
def start_worker(store_url: str) -> Iterator[StartWorker]:
    yield from worker_starter(store_url, APP)


@pytest.fixture
def admin(store_url: str) -> Iterator[Admin]:
    a = Admin(store_url, APP)
    yield a
    a.close()


def settled(admin: Admin, job_id: int, state: str, timeout: float = 20) -> JobRow:
    wait_for_sync(lambda: admin.job(job_id).state.value == state, timeout, f"job {job_id} {state}")
    return admin.job(job_id)


def cli_enqueue(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("--database-url", url, "enqueue", *args)


def test_cli_enqueue_follows_the_published_declaration(
    store_url: str, admin: Admin, start_worker: StartWorker
) -> None:
    start_worker("mail=4")
    done = cli_enqueue(store_url, "t.boom", "--args", "{}")
    row = admin.job(int(ok(done)))
    assert done.stderr == ""  # declared: no note
    assert (row.queue, row.max_attempts, row.priority) == ("mail", 3, 0)
    row = settled(admin, row.id, "failed")
    assert row.attempt == 3 and len(row.errors) == 3

    row = admin.job(int(ok(cli_enqueue(store_url, "mail.send"))))
    assert (row.queue, row.priority) == ("mail", 3)
    settled(admin, row.id, "completed")


def test_cli_options_win_and_undeclared_kinds_still_enqueue(
    store_url: str, admin: Admin, start_worker: StartWorker
) -> None:
    start_worker("mail=4")
    given = admin.job(int(ok(cli_enqueue(
        store_url, "t.boom", "--max-attempts", "5", "--priority", "-1", "--delay", "3600"
    ))))
    assert (given.queue, given.max_attempts, given.priority) == ("mail", 5, -1)
    other = admin.job(int(ok(cli_enqueue(store_url, "t.boom", "--queue", "elsewhere",
                                         "--delay", "3600"))))
    assert (other.queue, other.max_attempts) == ("elsewhere", 3)

    done = cli_enqueue(store_url, "nobody.declared", "--args", '{"a": 1}')
    row = admin.job(int(ok(done)))
    assert (row.queue, row.max_attempts, row.state.value) == ("default", 25, "available")
    [note] = done.stderr.strip().splitlines()
    assert "no server has published kind 'nobody.declared'" in note


PRODUCER = textwrap.dedent("""
    import asyncio, json, os, sys
    import kiln

    app = kiln.App(os.environ["KILN_DATABASE_URL"])  # no handlers: a web service, say
    assert "tests.integration.kinds_app" not in sys.modules
    ids = [app.enqueue("t.limited"), app.enqueue("t.limited"),
           app.enqueue_many([("t.boom", {}), ("t.boom", {}, {"max_attempts": 4})])]

    async def main():
        ids.append(await app.aenqueue("mail.send", {}))
        ids.append(await app.aenqueue_many([("t.limited", {})]))
        await app.aclose()

    asyncio.run(main())
    app.close()
    print(json.dumps(ids))
""")


def test_handler_less_client_in_another_process(
    store_url: str, admin: Admin, start_worker: StartWorker
) -> None:
    start_worker("mail=4")
    proc = subprocess.run(
        [sys.executable, "-c", PRODUCER], env=cli_env(KILN_DATABASE_URL=store_url,
                                                      PYTHONPATH=str(ROOT)),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    first, second, [boom, boom4], send, [third] = json.loads(proc.stdout)
    limited = [admin.job(i) for i in (first, second, third)]
    assert {(r.queue, r.rate_key) for r in limited} == {("mail", "t.limited")}
    assert admin.job(boom).max_attempts == 3 and admin.job(boom4).max_attempts == 4
    assert admin.job(send).queue == "mail"
    settled(admin, send, "completed")
    settled(admin, boom, "failed")
    # one admission an hour: exactly one of the three rate-limited jobs ran
    wait_for_sync(lambda: admin.states([first, second, third]).get("completed") == 1, 20,
             "one rate-limited job admitted")
    assert admin.states([first, second, third]) == {"completed": 1, "pending": 2}


async def test_a_server_that_rejoins_publishes_again(store_url: str) -> None:
    app = kiln.App(store_url)
    app.register("k", lambda job: None, queue="mail")
    app.migrate()
    server = app.server({"mail": 1}, kiln.ServerConfig(**FAST))
    task = asyncio.create_task(server.run())
    store: Any = server._store
    try:
        await wait_for(lambda: server.stats().state == "running", 15, "running")
        first = server.id

        async def unreachable(server_id: str, connections: int | None = None) -> bool:
            raise kiln.StoreError("server_heartbeat", "injected: database away")

        store.server_heartbeat = unreachable  # fails until the server fences itself
        await wait_for(lambda: server.stats().fenced > 0, 15, "fenced")
        del store.server_heartbeat
        await wait_for(lambda: server.healthy().ok and server.id != first, 15, "rejoined")

        async def republished() -> bool:
            return any(r.server_id == server.id and r.live for r in await store.kinds_list())

        await wait_for(republished, 15, "published under the new id")
    finally:
        server.stop()
        await asyncio.wait_for(task, 20)
        app.close()


def test_kiln_kinds_lists_declarations_servers_and_conflicts(
    store_url: str, admin: Admin, start_worker: StartWorker
) -> None:
    assert "no kinds published" in ok(run_cli("--database-url", store_url, "kinds"))
    worker = start_worker("mail=2")
    other = kiln.App(store_url)  # another service declaring t.boom differently
    other.register("t.boom", lambda job: None, queue="mail", max_attempts=7)
    other_server = other.server({"mail": 1})
    admin.portal.run(other_server._store.open())
    admin.portal.run(other_server._store.server_register(other_server.info))
    admin.portal.run(other_server.publish_kinds())
    try:
        data = json.loads(ok(run_cli("--database-url", store_url, "kinds", "--json")))
        kinds = {k["kind"]: k for k in data["kinds"]}
        assert set(kinds) == {"t.boom", "mail.send", "t.limited", "report.build"}
        assert data["conflicts"] == 1
        boom = kinds["t.boom"]
        assert boom["conflict"] and [d["options"]["max_attempts"] for d in
                                     boom["declarations"]] == [7, 3]
        assert boom["declarations"][0]["in_use"] and boom["declarations"][1]["servers"] == [
            worker.server_id]
        assert kinds["t.limited"]["declarations"][0]["options"]["rate_limit"] == {
            "rate": 1, "per": 3600.0, "burst": 0}
        text = ok(run_cli("--database-url", store_url, "kinds"))
        assert "1/3600s+0" in text and worker.server_id in text
        assert "conflicts: t.boom declared differently by live servers" in text
    finally:
        admin.portal.run(other_server._store.server_deregister(other_server.info.id))
        admin.portal.run(other_server._store.close())
        other.close()
    data = json.loads(ok(run_cli("--database-url", store_url, "kinds", "--json")))
    assert data["conflicts"] == 0


def test_a_published_unique_kind_is_unique_from_the_cli(
    store_url: str, admin: Admin, start_worker: StartWorker
) -> None:
    worker = start_worker("mail=1")
    worker.terminate()  # declared and published; nothing claims the jobs from here on
    worker.wait(20)
    first = cli_enqueue(store_url, "report.build", "--args", '{"tenant": 42}')
    again = cli_enqueue(store_url, "report.build", "--args", '{"tenant": 42, "x": 1}')
    assert ok(first) == ok(again) and first.stderr == ""
    assert "not inserted: unique job" in again.stderr
    other = cli_enqueue(store_url, "report.build", "--args", '{"tenant": 43}')
    assert ok(other) != ok(first)
    bad = cli_enqueue(store_url, "report.build", "--args", '{"x": 1}')
    assert bad.returncode == 2 and "no top-level key 'tenant'" in bad.stderr
    assert admin.states([int(ok(first)), int(ok(other))]) == {"available": 2}
