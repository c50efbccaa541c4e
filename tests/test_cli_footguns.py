"""The CLI's footguns closed (issue 43 item 6): bulk commands count before they act
(--dry-run), a filter without --state asks (a terminal) or needs --yes (anything else)
before cancelling or deleting, a forgotten database URL is named as the default kiln
used, multi-line errors print as lines, and exit codes follow the documented table."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kiln._model._job import AttemptError, JobRow, JobState
from kiln.cli import EXIT_ERROR, EXIT_USAGE
from kiln.cli import _output as out
from tests.support.cli import assert_fails, cli_env, count_jobs, enqueue, ok, run_cli, url

__all__ = ["url"]  # the fixture, imported for the tests below


def states(url: str, ids: list[int]) -> list[str]:
    return [ok(run_cli("--database-url", url, "jobs", "show", str(i), "--json"))
            .split('"state": "')[1].split('"')[0] for i in ids]


def test_dry_run_counts_and_changes_nothing(url: str) -> None:
    ids = [enqueue(url, "k", "--queue", "q") for _ in range(3)]
    for action in ("requeue", "cancel", "delete"):
        result = ok(run_cli("--database-url", url, "jobs", action, "--state", "available",
                            "--queue", "q", "--dry-run"))
        verb = {"requeue": "requeued", "cancel": "cancelled", "delete": "deleted"}[action]
        assert result.strip() == f"3 jobs match; dry run: nothing {verb}"
    one = ok(run_cli("--database-url", url, "jobs", "cancel", str(ids[0]), "--dry-run"))
    assert one.strip() == "1 job match; dry run: nothing cancelled"
    assert states(url, ids) == ["available"] * 3 and count_jobs(url) == 3


def test_a_filter_without_state_needs_yes_off_a_terminal(url: str) -> None:
    ids = [enqueue(url, "k", "--queue", "q") for _ in range(2)]
    for action in ("cancel", "delete"):
        assert_fails(run_cli("--database-url", url, "jobs", action, "--queue", "q"), 2,
                     "without --state", "--yes", "--dry-run")
    assert states(url, ids) == ["available"] * 2
    # with --state the filter says which jobs: no question
    assert ok(run_cli("--database-url", url, "jobs", "cancel", "--queue", "q", "--state",
                      "available")).strip() == "cancelled 2 jobs"
    assert ok(run_cli("--database-url", url, "jobs", "delete", "--queue", "q",
                      "--yes")).strip() == "deleted 2 jobs"
    assert count_jobs(url) == 0


@pytest.mark.parametrize("database_backend", ["sqlite"])
@pytest.mark.parametrize(("answer", "left"), [("n", 2), ("y", 0)])
def test_a_terminal_is_asked_with_the_count(url: str, answer: str, left: int) -> None:
    for _ in range(2):
        enqueue(url, "k", "--queue", "q")
    primary, secondary = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kiln.cli", "--database-url", url, "jobs", "delete",
             "--queue", "q"], stdin=secondary, stderr=secondary, stdout=subprocess.PIPE,
            env=cli_env(), text=True)
        seen = b""
        while b"[y/N]" not in seen:
            chunk = os.read(primary, 1024)
            assert chunk, seen
            seen += chunk
        assert b"2 jobs match, in every state (pending and running included)." in seen
        os.write(primary, f"{answer}\n".encode())
        stdout, _ = proc.communicate(timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    assert proc.returncode == (0 if answer == "y" else 1)
    assert count_jobs(url) == left
    assert stdout.strip() == ("deleted 2 jobs" if answer == "y" else "")


def test_a_forgotten_url_names_the_default_and_creates_nothing(tmp_path: Path) -> None:
    line = assert_fails(run_cli("jobs", "list", cwd=tmp_path), 1, "no database given",
                        "--database-url", "KILN_DATABASE_URL", "sqlite:///kiln.db",
                        str(tmp_path / "kiln.db"))
    assert "creates that file" in line
    assert list(tmp_path.iterdir()) == []


def test_a_multi_line_error_prints_as_lines_with_controls_escaped() -> None:
    now = datetime.now(UTC)
    error = ('relation "shop_orders" does not exist\nLINE 2: FROM shop_orders\n'
             '             ^ \x1b[31mred')
    row = JobRow(
        id=7, queue="q", kind="k", state=JobState.FAILED, args={}, params={}, metadata={},
        priority=0, run_at=now, attempt=1, max_attempts=1, timeout=None, backoff=None,
        errors=[AttemptError(attempt=1, at=now.timestamp(), error=error)], created_at=now,
        admitted_at=None, attempted_at=now, finished_at=now, server_id=None, rate_key=None,
        rescues=0, depends_on=[],
    )
    shown = out.job_details(row).splitlines()
    at = shown.index('error (attempt 1): relation "shop_orders" does not exist')
    assert shown[at + 1:at + 3] == ["  LINE 2: FROM shop_orders",
                                    "               ^ \\x1b[31mred"]
    assert "\\x0a" not in "\n".join(shown)


def test_exit_codes_follow_the_table(url: str) -> None:
    """0 success, 2 usage (bad flags or input), 1 the rest: a job not found or finished."""
    job = enqueue(url, "k")
    assert_fails(run_cli("--database-url", url, "jobs", "cancel", "--batch-size", "x"), 2)
    assert_fails(run_cli("--database-url", url, "enqueue", "k", "--priority", "many"), 2)
    ok(run_cli("--database-url", url, "jobs", "cancel", str(job)))
    assert_fails(run_cli("--database-url", url, "jobs", "cancel", str(job)), 1, "finished")
    assert_fails(run_cli("--database-url", url, "jobs", "show", "424242"), 1, "not found")
    assert EXIT_USAGE == 2 and EXIT_ERROR == 1
