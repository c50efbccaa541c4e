"""``kiln jobs list --before/--all`` and bulk actions in batches, on every database.

``--all`` streams every match as JSON lines, one page in memory at a time; requeue,
cancel and delete over a filter run in bound batches and print their progress on stderr
(plain lines on a pipe); an interrupted run says which flags finish the rest.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import tracemalloc
from typing import Any

import pytest

from kiln import cli
from kiln._client._bulk import Bulk, Progress
from kiln._client._client import Client
from kiln._errors import StoreError
from kiln._model._job import JobFilter, JobRow, NewJob
from kiln.cli._bulk import ProgressDisplay
from kiln.stores import store_from_url
from tests.support.cli import fail_jobs, ok, run_cli, url

__all__ = ["url"]  # the fixture, re-used


async def _insert(url: str, n: int, queue: str = "bulk") -> list[int]:
    store = store_from_url(url)
    await store.open()
    try:
        ids: list[int] = []
        for start in range(0, n, 1000):
            ids += await store.job_insert_many([
                NewJob(kind="email.send", queue=queue,
                       args={"to": f"user{i}@example.com", "body": "x" * 200})
                for i in range(start, min(n, start + 1000))
            ])
        return [int(i) for i in ids]
    finally:
        await store.close()


def _listed(*args: str) -> list[int]:
    return [j["id"] for j in json.loads(ok(run_cli(*args, "--json")))]


def test_list_pages_with_before(url: str) -> None:
    ids = sorted(asyncio.run(_insert(url, 7)), reverse=True)
    base = ("--database-url", url, "jobs", "list", "--limit", "3")
    assert _listed(*base) == ids[:3]
    assert _listed(*base, "--before", str(ids[2])) == ids[3:6]
    assert _listed(*base, "--before", str(ids[5])) == ids[6:]
    text = run_cli(*base, "--before", str(ids[2]))
    assert text.stderr.strip() == f"next page: --before {ids[5]}"
    last = run_cli(*base, "--before", str(ids[5]))
    assert last.stderr == ""  # a short page is the last one
    rest = ok(run_cli("--database-url", url, "jobs", "list", "--all", "--before", str(ids[2]),
                      "--page-size", "2"))
    assert [json.loads(line)["id"] for line in rest.splitlines()] == ids[3:]  # resumed


def test_list_all_says_how_far_it_got(url: str, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A progress line each second on stderr (how many, and the --before that resumes)
    and one at the end; stdout holds the JSON lines only."""
    ids = sorted(asyncio.run(_insert(url, 30)), reverse=True)
    monkeypatch.setattr("kiln.cli._bulk.EVERY", 0.0)  # a line after every page
    code = cli.run(["--database-url", url, "jobs", "list", "--all", "--page-size", "10"])
    captured = capsys.readouterr()
    assert code == 0 and len(captured.out.splitlines()) == 30
    lines = captured.err.splitlines()
    assert lines[0].startswith("list --all: 10 jobs so far (")
    assert lines[0].endswith(f"the rest: --before {ids[9]}")
    assert re.fullmatch(r"list --all: 30 jobs in \d+\.\d s", lines[-1])


class _Lines(io.StringIO):
    """stdout that keeps only the id of each line written (so that it holds no more
    than the ids in memory) and counts the lines."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[int] = []

    @property
    def lines(self) -> int:
        return len(self.ids)

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.ids.append(json.loads(line)["id"])
        return len(text)


def test_list_all_streams_every_match_one_page_at_a_time(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = asyncio.run(_insert(url, 3000))
    asyncio.run(_insert(url, 5, queue="other"))
    stdout = _Lines()
    monkeypatch.setattr("sys.stdout", stdout)
    calls: list[tuple[int, int, int]] = []  # (limit, rows, lines written before the read)
    original = Client.list

    async def spied(self: Client, f: JobFilter, limit: int = 50, **keys: Any) -> list[JobRow]:
        before = stdout.lines
        rows = await original(self, f, limit, **keys)
        calls.append((limit, len(rows), before))
        return rows

    monkeypatch.setattr(Client, "list", spied)
    tracemalloc.start()
    try:
        code = cli.run(["--database-url", url, "jobs", "list", "--all", "--queue", "bulk",
                        "--page-size", "100"])
        _, streamed = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        every = asyncio.run(_load_all(url))
        _, loaded = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0
    assert stdout.ids == sorted(ids, reverse=True) and every == 3000
    assert {(limit, rows) for limit, rows, _ in calls} == {(100, 100), (100, 0)}
    # each page was written before the next one was read: never more than one in memory
    assert [before for _, _, before in calls] == [100 * k for k in range(len(calls))]
    assert streamed < loaded / 3, (streamed, loaded)


async def _load_all(url: str) -> int:
    """What holding every row at once costs (the peak --all must stay well under)."""
    store = store_from_url(url)
    await store.open()
    try:
        rows: list[JobRow] = []
        before = None
        while page := await store.job_list(JobFilter(queue="bulk"), 1000, before_id=before):
            rows += page
            before = page[-1].id
        return len(rows)
    finally:
        await store.close()


def test_list_all_refuses_limit_json_and_a_bad_page_size(url: str) -> None:
    for extra in (["--limit", "5"], ["--json"], ["--page-size", "0"], ["--page-size", "1001"]):
        result = run_cli("--database-url", url, "jobs", "list", "--all", *extra)
        assert result.returncode == 2 and result.stdout == "", result
        assert result.stderr.count("\n") == 1 and "kiln: error:" in result.stderr


PROGRESS = re.compile(r"^requeue: (\d+)/30 \(\d+%\), (\d+) requeued, (\d+) batch(es)?( done)?$")


def test_requeue_in_batches_prints_plain_progress_on_a_pipe(url: str) -> None:
    asyncio.run(_insert(url, 30, queue="mail"))
    failed = asyncio.run(fail_jobs(url, "mail", 30))
    result = run_cli("--database-url", url, "jobs", "requeue", "--state", "failed",
                     "--batch-size", "7")
    assert ok(result).strip() == "requeued 30 jobs"
    first, *lines = result.stderr.splitlines()
    assert first.startswith(f"requeue: 30 matching jobs, bound to --max-id {max(failed)}"
                            " --finished-before 20")
    assert "\r" not in result.stderr and lines
    matches = [PROGRESS.match(line) for line in lines]
    assert all(matches), lines
    assert lines[0] == "requeue: 7/30 (23%), 7 requeued, 1 batch"
    assert lines[-1] == "requeue: 30/30 (100%), 30 requeued, 5 batches done"
    assert _listed("--database-url", url, "jobs", "list", "--state", "failed") == []


def test_cancel_and_delete_in_batches(url: str) -> None:
    ids = asyncio.run(_insert(url, 12))
    kept = asyncio.run(_insert(url, 2, queue="other"))
    result = run_cli("--database-url", url, "jobs", "cancel", "--queue", "bulk", "--yes",
                     "--batch-size", "5")
    assert ok(result).strip() == "cancelled 12 jobs"
    assert result.stderr.splitlines()[-1] == ("cancel: 12/12 (100%), 12 cancelled,"
                                              " 3 batches done")
    result = run_cli("--database-url", url, "jobs", "delete", "--state", "cancelled",
                     "--batch-size", "5")
    assert ok(result).strip() == "deleted 12 jobs"
    assert _listed("--database-url", url, "jobs", "list", "--limit", "100") == kept[::-1]
    assert not set(ids) & set(kept)
    bad = run_cli("--database-url", url, "jobs", "delete", "--queue", "other", "--yes",
                  "--batch-size", "0")
    assert bad.returncode == 2 and "--batch-size must be between 1 and 1000" in bad.stderr
    assert len(_listed("--database-url", url, "jobs", "list")) == 2


def test_interrupted_requeue_says_how_to_finish_and_a_rerun_does(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_insert(url, 20, queue="mail"))
    failed = asyncio.run(fail_jobs(url, "mail", 20))
    original = Bulk._apply
    batches: list[JobFilter] = []

    async def failing(self: Bulk, f: JobFilter) -> int:
        batches.append(f)
        if len(batches) == 2:
            raise StoreError("jobs_requeue", "connection lost (injected)")
        return await original(self, f)

    monkeypatch.setattr(Bulk, "_apply", failing)
    code = cli.run(["--database-url", url, "jobs", "requeue", "--state", "failed",
                    "--batch-size", "8"])
    err = capsys.readouterr().err
    assert code == 1 and "kiln: error: jobs_requeue: connection lost (injected)" in err
    hint = re.search(r"stopped after 1 batch \(8 requeued\); the same command with"
                     r" (--max-id \d+ --finished-before \S+) finishes the rest", err)
    assert hint, err
    left = _listed("--database-url", url, "jobs", "list", "--state", "failed")
    assert sorted(left) == sorted(failed)[:12]  # the newest 8 went back, whole
    again = asyncio.run(fail_jobs(url, "mail", 1))  # one of them fails again: not redone
    monkeypatch.setattr(Bulk, "_apply", original)
    result = run_cli("--database-url", url, "jobs", "requeue", "--state", "failed",
                     *hint.group(1).split())
    assert ok(result).strip() == "requeued 12 jobs"
    assert _listed("--database-url", url, "jobs", "list", "--state", "failed") == again


def test_progress_bar_on_a_terminal() -> None:
    stream = io.StringIO()
    show = ProgressDisplay(stream, tty=True)
    show(Progress("delete", total=10, done=5, seen=5, batches=1))
    show(Progress("delete", total=10, done=10, seen=10, batches=2, finished=True))
    first, second = stream.getvalue().split("\r")[1:]
    assert first == "delete [" + "#" * 15 + "-" * 15 + "] 5/10 (50%), 5 deleted, 1 batch"
    assert second.endswith("] 10/10 (100%), 10 deleted, 2 batches\n") and "-" not in second[:40]
