"""``kiln enqueue --tag`` and the ``--tag`` / ``--meta`` / ``--arg`` filters of ``kiln jobs``
(list, requeue, cancel, delete), on every backend; bad filters fail and write nothing.

The command runs in this process (``kiln.cli.run``): tests/test_cli.py covers it as a
subprocess, and some forty subprocesses would take minutes here."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from kiln._model._job import NewJob
from kiln.cli import run
from kiln.stores import store_from_url
from tests.support.cli import assert_fails, count_jobs, fail_jobs, ok, url

__all__ = ["url"]  # the fixture, imported for the tests below


class InProcess:
    """``kiln ARGS`` run in this process, its result read as a subprocess's."""

    capsys: pytest.CaptureFixture[str] | None = None

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.capsys is not None
        self.capsys.readouterr()
        code = run(list(args))
        out, err = self.capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)


run_cli = InProcess()


@pytest.fixture(autouse=True)
def _capture(capsys: pytest.CaptureFixture[str]) -> None:
    run_cli.capsys = capsys


def _cli(url: str, *args: str) -> str:
    return ok(run_cli("--database-url", url, *args))


def job_json(url: str, job_id: int) -> dict[str, object]:
    data: dict[str, object] = json.loads(_cli(url, "jobs", "show", str(job_id), "--json"))
    return data


def _listed(url: str, *flags: str) -> list[int]:
    return [j["id"] for j in json.loads(_cli(url, "jobs", "list", "--json", *flags))]


async def _insert(url: str, *jobs: NewJob) -> list[int]:
    store = store_from_url(url)
    await store.open()
    try:
        return await store.job_insert_many(list(jobs))
    finally:
        await store.close()


def test_enqueue_tags_and_list_filters(url: str) -> None:
    a = int(_cli(url, "enqueue", "email.send", "--tag", "billing", "--tag", "eu"))
    b = int(_cli(url, "enqueue", "email.send", "--tag", "billing", "--args",
                 '{"tenant": 42, "plan": "pro"}'))
    [c, d] = asyncio.run(_insert(
        url, NewJob("email.send", {}, metadata={"tenant": 42, "vip": True}),
        NewJob("email.send", {}, metadata={"tenant": "42"}),
    ))
    assert job_json(url, a)["tags"] == ["billing", "eu"] and job_json(url, c)["tags"] == []
    assert _listed(url, "--tag", "billing") == [b, a]
    assert _listed(url, "--tag", "billing", "--tag", "eu") == [a]
    assert _listed(url, "--meta", "tenant=42") == [c]
    assert _listed(url, "--meta", 'tenant="42"') == [d]
    assert _listed(url, "--meta", "tenant=42", "--meta", "vip=true") == [c]
    assert _listed(url, "--arg", "tenant=42", "--arg", "plan=pro") == [b]
    assert "tags" in _cli(url, "jobs", "show", str(a))


def test_bulk_actions_take_the_filters(url: str) -> None:
    ids = [int(_cli(url, "enqueue", "email.send", "--queue", "mail", "--max-attempts", "1",
                    "--args", json.dumps({"tenant": 42 if i < 3 else 7})))
           for i in range(5)]
    failed = asyncio.run(fail_jobs(url, "mail", 10))
    assert sorted(failed) == ids
    out = _cli(url, "jobs", "requeue", "--state", "failed", "--arg", "tenant=42",
               "--max-id", str(ids[1]))
    assert out.strip() == "requeued 2 jobs"
    assert [job_json(url, i)["state"] for i in ids] == [
        "available", "available", "failed", "failed", "failed"]
    assert _cli(url, "jobs", "cancel", "--arg", "tenant=42", "--yes").strip() == (
        "cancelled 2 jobs")
    assert _cli(url, "jobs", "delete", "--arg", "tenant=7", "--yes").strip() == (
        "deleted 2 jobs")
    assert count_jobs(url) == 3


def test_bad_tags_and_filters_fail_and_write_nothing(url: str) -> None:
    before = count_jobs(url)
    long_tag = "x" * 101
    for flags, words in (
        (("--tag", ""), ["tag", "non-empty"]),
        (("--tag", long_tag), ["101", "limit is 100"]),
        (("--tag", "a\x1b[31m"), ["U+001B"]),
        (tuple(f"--tag=t{i}" for i in range(21)), ["21 tags", "limit is 20"]),
    ):
        assert_fails(run_cli("--database-url", url, "enqueue", "k", *flags), 2, *words)
    assert count_jobs(url) == before
    for action in ("list", "requeue", "cancel", "delete"):
        state: tuple[str, ...] = ("--state", "failed") if action == "requeue" else ()
        state += ("--yes",) if action in ("cancel", "delete") else ()
        for flags, words in (
            (("--meta", "tenant"), ["key=value", "tenant"]),
            (("--meta", "tenant=[1]"), []),
            (("--meta", "=1"), ["key=value"]),
            (("--tag", ""), ["tag"]),
        ):
            result = run_cli("--database-url", url, "jobs", action, *state, *flags)
            if flags == ("--meta", "tenant=[1]"):  # a list is taken as the string "[1]"
                assert result.returncode == 0, result.stderr
                continue
            assert_fails(result, 2, *words)
    assert_fails(run_cli("--database-url", url, "jobs", "delete"), 2, "ID", "--tag")
    assert count_jobs(url) == before
