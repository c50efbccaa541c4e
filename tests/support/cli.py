"""Running the ``kiln`` command line in the tests, and reading what it wrote."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kiln._model._job import AttemptError, JobResult, Outcome
from kiln.stores import store_from_url
from tests.support import stores


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    env.update(extra)
    return env


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``python -m kiln.cli ARGS`` with no KILN_* variables unless ``env`` sets them."""
    return subprocess.run(
        [sys.executable, "-m", "kiln.cli", *args], cwd=cwd, env=env or cli_env(),
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def assert_fails(result: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """Exit ``code``, one line on stderr naming every word, nothing on stdout."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kiln: error: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    return lines[0]


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def count_jobs(url: str) -> int:
    """How many jobs the database at ``url`` holds."""
    return asyncio.run(stores.count_jobs(url))


def job_json(url: str, job_id: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(ok(run_cli("--database-url", url, "jobs", "show",
                                                 str(job_id), "--json")))
    return data


@pytest.fixture
def url(store_url: str) -> str:
    """A migrated database of each backend, migrated through the CLI."""
    ok(run_cli("migrate", "--database-url", store_url))
    return store_url


def enqueue(url: str, kind: str, *options: str) -> int:
    return int(ok(run_cli("--database-url", url, "enqueue", kind, *options)).strip())


async def fail_jobs(url: str, queue: str, count: int) -> list[int]:
    """Claim ``count`` jobs of ``queue`` and fail them for good, as a worker would."""
    store = store_from_url(url)
    await store.open()
    try:
        claimed = await store.job_claim(queue, ["email.send", "report.build"], count, "srv-1")
        error = AttemptError(attempt=1, at=0.0, error="RuntimeError: boom", server_id="srv-1")
        await store.job_results_apply([
            JobResult(job_id=row.id, server_id="srv-1", attempt=row.attempt,
                      outcome=Outcome.FAILED, error=error)
            for row in claimed
        ])
        return [row.id for row in claimed]
    finally:
        await store.close()
