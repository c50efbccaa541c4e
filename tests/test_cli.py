"""The ``kiln`` command, run as a subprocess: admin commands, exit codes, bad input.

Every command runs against a temporary SQLite file, and those that touch the
database also against PostgreSQL (the ``store_url`` fixture). A failure must exit
with 2 (usage) or 1 (anything else), print exactly one line on stderr, and write
nothing.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

import kiln
from kiln import JobState
from kiln._model._job import ServerInfo
from kiln._model._wakeup import CANCEL_PAYLOAD
from kiln.stores import store_from_url
from tests.support.cli import (
    assert_fails,
    cli_env,
    count_jobs,
    enqueue,
    fail_jobs,
    job_json,
    ok,
    run_cli,
)
from tests.support.cli import url as url

UNREACHABLE_URL = "postgresql://postgres@127.0.0.1:1/x"


# the command itself --------------------------------------------------------------------
def test_help_version_and_both_entry_points(tmp_path: Path) -> None:
    assert "enqueue" in ok(run_cli("--help"))
    assert ok(run_cli("--version")).strip() == f"kiln {kiln.__version__}"
    script = Path(sys.executable).parent / "kiln"
    result = subprocess.run([str(script), "--version"], capture_output=True, text=True,
                            env=cli_env(), timeout=60, check=False)
    assert ok(result).strip() == f"kiln {kiln.__version__}"
    for command in ("migrate", "enqueue", "jobs", "worker", "servers", "retry-window", "demo"):
        assert command in ok(run_cli(command, "--help")) or command == "jobs"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        ((), ["COMMAND"]),
        (("frobnicate",), ["frobnicate"]),
        (("jobs",), ["ACTION"]),
        (("jobs", "show", "abc"), ["abc"]),
        (("jobs", "list", "--state", "bogus"), ["bogus"]),
        (("jobs", "cancel"), ["ID"]),
        (("enqueue",), ["kind"]),
        (("enqueue", "x", "--priority", "high"), ["high"]),
    ],
)
def test_malformed_command_lines_are_usage_errors(
    argv: Sequence[str], words: list[str], tmp_path: Path
) -> None:
    assert_fails(run_cli(*argv, cwd=tmp_path), 2, *words)
    assert list(tmp_path.iterdir()) == []


# migrate and the database URL --------------------------------------------------------------
def test_migrate_defaults_to_kiln_db_in_the_working_directory(tmp_path: Path) -> None:
    first = ok(run_cli("migrate", cwd=tmp_path))
    assert "applied migration" in first
    assert (tmp_path / "kiln.db").exists()
    again = ok(run_cli("migrate", cwd=tmp_path))
    assert "up to date" in again
    # the installation id the first migration made, the same every time after
    (installation,) = re.findall(r"^installation ([0-9a-f]{16})$", first, re.M)
    assert f"installation {installation}" in again
    assert f"installation {installation}" in ok(run_cli("migrate", "--status", cwd=tmp_path))
    job_id = int(ok(run_cli("enqueue", "x", cwd=tmp_path)))
    assert count_jobs(f"sqlite:///{tmp_path / 'kiln.db'}") == 1 and job_id >= 1


def test_flag_beats_environment_beats_default(tmp_path: Path) -> None:
    env_url, flag_url = f"sqlite:///{tmp_path / 'env.db'}", f"sqlite:///{tmp_path / 'flag.db'}"
    env = cli_env(KILN_DATABASE_URL=env_url)
    ok(run_cli("migrate", cwd=tmp_path, env=env))
    ok(run_cli("--database-url", flag_url, "migrate", cwd=tmp_path, env=env))
    ok(run_cli("enqueue", "x", cwd=tmp_path, env=env))
    # the flag works after the sub-command too
    ok(run_cli("enqueue", "y", "--database-url", flag_url, cwd=tmp_path, env=env))
    ok(run_cli("enqueue", "y", "--database-url", flag_url, cwd=tmp_path, env=env))
    assert (count_jobs(env_url), count_jobs(flag_url)) == (1, 2)
    assert not (tmp_path / "kiln.db").exists()


def test_unknown_scheme_is_a_usage_error(tmp_path: Path) -> None:
    for argv in (("migrate",), ("enqueue", "x"), ("jobs", "list"), ("servers",)):
        assert_fails(run_cli("--database-url", "foo://x/y", *argv, cwd=tmp_path), 2,
                     "database_url", "foo")
    assert list(tmp_path.iterdir()) == []


def test_unreachable_database_fails_with_one_line() -> None:
    line = assert_fails(run_cli("--database-url", UNREACHABLE_URL, "enqueue", "x"), 1)
    assert "127.0.0.1" in line and ("reach" in line or "connect" in line), line


def test_sqlite_file_that_does_not_exist_is_not_created(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    for argv in (("enqueue", "x"), ("jobs", "list"), ("jobs", "show", "1"), ("servers",),
                 ("jobs", "requeue", "--state", "failed")):
        assert_fails(run_cli("--database-url", url, *argv), 1, "kiln migrate")
    assert list(tmp_path.iterdir()) == []


def test_not_migrated_database_is_refused_and_left_alone(empty_store_url: str) -> None:
    if empty_store_url.startswith("sqlite"):
        Path(empty_store_url[len("sqlite:///"):]).touch()  # exists, but no schema
    assert_fails(run_cli("--database-url", empty_store_url, "enqueue", "x"), 1, "kiln migrate")
    assert_fails(run_cli("--database-url", empty_store_url, "jobs", "list"), 1, "kiln migrate")

    async def still_missing() -> None:
        store = store_from_url(empty_store_url)
        await store.open()
        try:
            with pytest.raises(kiln.NotMigratedError):
                await store.schema_check()
        finally:
            await store.close()

    asyncio.run(still_missing())


# enqueue ----------------------------------------------------------------------------------
def test_enqueue_prints_the_id_and_stores_every_option(url: str) -> None:
    job_id = enqueue(url, "email.send", "--args", '{"to": "a@example.com", "n": [1, 2]}',
                     "--queue", "mail", "--priority", "-3", "--max-attempts", "12",
                     "--timeout", "60")
    job = job_json(url, job_id)
    assert job["id"] == job_id
    assert (job["kind"], job["queue"], job["priority"], job["max_attempts"], job["timeout"]) == (
        "email.send", "mail", -3, 12, 60.0)
    assert job["args"] == {"to": "a@example.com", "n": [1, 2]}
    assert job["state"] == "available" and job["attempt"] == 0
    second = enqueue(url, "email.send")
    assert second > job_id
    assert job_json(url, second)["args"] == {}


def test_enqueue_with_delay_is_scheduled(url: str) -> None:
    job = job_json(url, enqueue(url, "later", "--delay", "30"))
    assert job["state"] == "scheduled"
    from datetime import datetime

    wait = datetime.fromisoformat(job["run_at"]) - datetime.fromisoformat(job["created_at"])
    assert wait.total_seconds() == pytest.approx(30, abs=1)


@pytest.mark.parametrize(
    ("options", "code", "words"),
    [
        (("x", "--args", "{not json"), 2, ["--args", "JSON"]),
        (("x", "--args", "NaN"), 2, ["args", "JSON"]),
        (("",), 2, ["kind", "non-empty"]),
        (("   ",), 2, ["kind"]),
        (("k" * 201,), 2, ["kind", "201", "200"]),
        (("x", "--queue", ""), 2, ["queue"]),
        (("x", "--queue", "q" * 300), 2, ["queue", "300"]),
        (("x", "--delay", "-1"), 2, ["delay", "negative"]),
        (("x", "--delay", "inf"), 2, ["delay"]),
        (("x", "--max-attempts", "0"), 2, ["max_attempts", "at least 1"]),
        (("x", "--max-attempts", "-5"), 2, ["max_attempts"]),
        (("x", "--timeout", "0"), 2, ["timeout"]),
        (("x", "--priority", str(2**40)), 2, ["priority"]),
    ],
)
def test_bad_enqueue_input_writes_nothing(
    url: str, options: Sequence[str], code: int, words: list[str]
) -> None:
    assert_fails(run_cli("--database-url", url, "enqueue", *options), code, *words)
    assert count_jobs(url) == 0


# jobs list / show -------------------------------------------------------------------------
def test_jobs_list_filters_limits_and_prints_json(url: str) -> None:
    a = enqueue(url, "email.send", "--queue", "mail")
    b = enqueue(url, "report.build")
    c = enqueue(url, "email.send", "--queue", "mail", "--delay", "60")
    listed = json.loads(ok(run_cli("--database-url", url, "jobs", "list", "--json")))
    assert [j["id"] for j in listed] == [c, b, a]  # newest first
    by = {
        ("--queue", "mail"): [c, a],
        ("--kind", "report.build"): [b],
        ("--state", "scheduled"): [c],
        ("--state", "available", "--kind", "email.send"): [a],
        ("--limit", "2"): [c, b],
        ("--state", "failed"): [],
    }
    for flags, ids in by.items():
        rows = json.loads(ok(run_cli("--database-url", url, "jobs", "list", "--json", *flags)))
        assert [j["id"] for j in rows] == ids, flags
    text = ok(run_cli("--database-url", url, "jobs", "list"))
    header, *lines = text.strip().splitlines()
    assert header.split()[:3] == ["ID", "STATE", "QUEUE"]
    assert [int(line.split()[0]) for line in lines] == [c, b, a]
    assert "scheduled" in lines[0] and "report.build" in lines[1]
    assert ok(run_cli("--database-url", url, "jobs", "list", "--kind", "nope")).strip() == (
        "no jobs")


def test_jobs_list_rejects_a_bad_limit(url: str) -> None:
    assert_fails(run_cli("--database-url", url, "jobs", "list", "--limit", "0"), 2, "limit")
    assert_fails(run_cli("--database-url", url, "jobs", "list", "--limit", "5000"), 2, "limit")


def test_jobs_show_text_and_missing_job(url: str) -> None:
    job_id = enqueue(url, "email.send", "--args", '{"to": "b@example.com"}')
    text = ok(run_cli("--database-url", url, "jobs", "show", str(job_id)))
    assert "email.send" in text and "b@example.com" in text and "available" in text
    assert_fails(run_cli("--database-url", url, "jobs", "show", "999999"), 1, "999999",
                 "not found")


# requeue / cancel / delete ------------------------------------------------------------
def test_requeue_by_state_queue_and_kind_gives_a_full_budget(url: str) -> None:
    for _ in range(3):
        enqueue(url, "email.send", "--queue", "mail", "--max-attempts", "3")
    enqueue(url, "report.build", "--queue", "mail")
    enqueue(url, "email.send", "--queue", "other")
    failed = asyncio.run(fail_jobs(url, "mail", 10))
    asyncio.run(fail_jobs(url, "other", 10))
    assert len(failed) == 4
    out = ok(run_cli("--database-url", url, "jobs", "requeue", "--state", "failed",
                     "--queue", "mail", "--kind", "email.send"))
    assert out.strip() == "requeued 3 jobs"
    states = json.loads(ok(run_cli("--database-url", url, "jobs", "list", "--json")))
    by_state = {(j["queue"], j["kind"], j["state"]) for j in states}
    assert by_state == {("mail", "email.send", "available"), ("mail", "report.build", "failed"),
                        ("other", "email.send", "failed")}
    for job in states:
        if job["state"] == "available":
            assert job["attempt"] == 0 and job["errors"], job  # full budget, history kept
    assert ok(run_cli("--database-url", url, "jobs", "requeue", "--state", "failed")).strip() \
        == "requeued 2 jobs"


def test_requeue_cancel_and_delete_by_id(url: str) -> None:
    a, b, c = (enqueue(url, "email.send") for _ in range(3))
    failed = asyncio.run(fail_jobs(url, "default", 1))
    assert failed == [a]
    assert ok(run_cli("--database-url", url, "jobs", "requeue", str(a))).strip() == (
        "requeued 1 job")
    assert job_json(url, a)["state"] == "available"
    assert ok(run_cli("--database-url", url, "jobs", "cancel", str(b), str(c))).strip() == (
        "cancelled 2 jobs")
    assert {job_json(url, i)["state"] for i in (b, c)} == {"cancelled"}
    assert ok(run_cli("--database-url", url, "jobs", "delete", str(a), str(b))).strip() == (
        "deleted 2 jobs")
    assert count_jobs(url) == 1
    assert ok(run_cli("--database-url", url, "jobs", "delete", "424242")).strip() == (
        "deleted 0 jobs")


def test_requeue_needs_ids_or_a_state(url: str) -> None:
    enqueue(url, "email.send")
    assert_fails(run_cli("--database-url", url, "jobs", "requeue"), 2, "--state")
    assert_fails(run_cli("--database-url", url, "jobs", "requeue", "--queue", "default"), 2,
                 "--state")


# servers ----------------------------------------------------------------------------------
def test_servers_lists_registered_servers_and_the_leader(url: str) -> None:
    assert ok(run_cli("--database-url", url, "servers")).strip() == "no servers registered"

    async def register() -> None:
        from datetime import UTC, datetime

        store = store_from_url(url)
        await store.open()
        try:
            for name in ("srv-a", "srv-b"):
                await store.server_register(ServerInfo(
                    id=name, host="h1", pid=42, queues={"mail": 5}, kinds=["email.send"],
                    version=kiln.__version__, started_at=datetime.now(UTC),
                ))
                await store.server_heartbeat(name, 3 if name == "srv-a" else None)
            assert await store.leader_elect("srv-b", 30.0)
        finally:
            await store.close()

    asyncio.run(register())
    data = json.loads(ok(run_cli("--database-url", url, "servers", "--json")))
    assert data["leader"] == "srv-b"
    assert {(s["id"], s["leader"], s["pid"], s["connections"]) for s in data["servers"]} == {
        ("srv-a", False, 42, 3), ("srv-b", True, 42, None)}
    text = ok(run_cli("--database-url", url, "servers"))
    header, *lines = text.strip().splitlines()
    assert header.split()[-2:] == ["CONNS", "LEADER"]
    rows = {line.split()[0]: line for line in lines}
    assert rows["srv-b"].endswith("yes") and not rows["srv-a"].endswith("yes")
    assert "mail=5" in rows["srv-a"]
    assert rows["srv-a"].split()[-1] == "3" and rows["srv-b"].split()[-2] == "-"


# retry-window -----------------------------------------------------------------------------
def test_retry_window_of_the_operators_guide_is_six_to_twelve_minutes() -> None:
    argv = ("retry-window", "--backoff", "exponential", "--base", "2", "--max", "120",
            "--max-attempts", "12")
    data = json.loads(ok(run_cli(*argv, "--json")))
    # 11 waits of min(120, 2 * 2**(n-1)), each drawn between half and all of it
    assert data["longest_seconds"] == 2 + 4 + 8 + 16 + 32 + 64 + 5 * 120 == 726
    assert data["shortest_seconds"] == 363
    assert 6 * 60 <= data["shortest_seconds"] < 7 * 60
    assert 12 * 60 <= data["longest_seconds"] < 13 * 60
    text = ok(run_cli(*argv))
    assert text.startswith("shortest 6m 3s (363s), longest 12m 6s (726s)"), text


def test_retry_window_constant_and_bad_values() -> None:
    data = json.loads(ok(run_cli("retry-window", "--backoff", "constant", "--base", "5",
                                 "--max-attempts", "4", "--json")))
    assert (data["shortest_seconds"], data["longest_seconds"], data["waits"]) == (15, 15, 3)
    one = json.loads(ok(run_cli("retry-window", "--max-attempts", "1", "--json")))
    assert one["longest_seconds"] == 0
    assert_fails(run_cli("retry-window", "--max-attempts", "0"), 2, "max_attempts")
    assert_fails(run_cli("retry-window", "--base", "-1"), 2, "base")
    assert_fails(run_cli("retry-window", "--base", "10", "--max", "5"), 2, "max")
    assert_fails(run_cli("retry-window", "--backoff", "linear"), 2, "linear")


def test_states_offered_by_the_cli_are_the_job_states() -> None:
    from kiln.cli import jobs

    assert [s.value for s in JobState] == jobs.STATES


def test_cancel_of_one_finished_or_unknown_job_is_an_error(url: str) -> None:
    done = enqueue(url, "email.send")
    ok(run_cli("--database-url", url, "jobs", "cancel", str(done)))
    # exit 1, not the usage code: the command was right, the job is not there to cancel
    assert_fails(run_cli("--database-url", url, "jobs", "cancel", str(done)), 1,
                 f"job {done} has finished already (cancelled)")
    assert_fails(run_cli("--database-url", url, "jobs", "cancel", "424242"), 1,
                 "job 424242 not found")


def test_cancel_of_several_reports_the_finished_and_unknown_ones(url: str) -> None:
    done, live = enqueue(url, "email.send"), enqueue(url, "email.send")
    ok(run_cli("--database-url", url, "jobs", "cancel", str(done)))
    proc = run_cli("--database-url", url, "jobs", "cancel", str(done), str(live), "424242")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "cancelled 1 job"
    assert f"1 finished already, not cancelled: {done} (cancelled)" in proc.stderr
    assert "1 not found: 424242" in proc.stderr
    assert job_json(url, live)["state"] == "cancelled"


async def test_cancel_publishes_on_a_redis_bus_when_asked(tmp_path: Path) -> None:
    """MySQL and SQLite workers on a RedisBus stop the handler at once when told."""
    url = f"sqlite:///{tmp_path / 'kiln.db'}"
    ok(run_cli("migrate", "--database-url", url))
    job_id = enqueue(url, "email.send")
    channel = f"kiln-cli-{uuid.uuid4().hex[:8]}"
    bus = kiln.RedisBus("redis://127.0.0.1:6379/0", channel)
    got: list[str] = []
    await bus.subscribe(lambda _channel, payload: got.append(payload))
    try:
        proc = await asyncio.to_thread(
            run_cli, "--database-url", url, "jobs", "cancel", str(job_id),
            "--redis", "redis://127.0.0.1:6379/0", "--redis-channel", channel)
        assert proc.returncode == 0 and proc.stdout.strip() == "cancelled 1 job", proc.stderr
        deadline = time.monotonic() + 5
        while CANCEL_PAYLOAD not in got and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert got == [CANCEL_PAYLOAD]
    finally:
        await bus.close()
