"""``kiln demo``: jobs flow on a fresh directory, every path shows, extras are served, and
it stops on time or on Ctrl-C."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from kiln import JobFilter, JobRow, JobState
from kiln.stores import store_from_url
from tests.support.cli import assert_fails, cli_env, run_cli
from tests.support.net import free_port
from tests.support.waits import wait_for_sync

LINE = re.compile(
    r"^\[(?:\s*\d+s|stopped after \d+s)\]\s+[\d.]+ jobs/s \| scheduled \d+  available \d+  "
    r"running \d+  completed (\d+)  failed (\d+)  cancelled \d+ \| this run: completed \d+, "
    r"retried \d+, failed \d+$"
)


def demo_jobs(directory: Path) -> list[JobRow]:
    async def run() -> list[JobRow]:
        store = store_from_url(f"sqlite:///{directory / 'kiln-demo.db'}")
        await store.open()
        try:
            return await store.job_list(JobFilter(), limit=1000)
        finally:
            await store.close()

    return asyncio.run(run())


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except OSError:
        return 0, ""


def start_demo(directory: Path, *flags: str) -> tuple[subprocess.Popen[str], int, int]:
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kiln.cli", "demo", "--port", str(port), "--metrics-port",
         str(metrics_port), "--interval", "1", *flags],
        cwd=directory, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    return proc, port, metrics_port


def test_demo_shows_every_path_a_job_can_take(tmp_path: Path) -> None:
    proc, port, metrics_port = start_demo(tmp_path, "--duration", "8")
    try:
        wait_for_sync(lambda: fetch(f"http://127.0.0.1:{port}/")[0] == 200, 30.0,
                      "the dashboard", interval=0.1)
        wait_for_sync(lambda: "kiln_jobs_" in fetch(
            f"http://127.0.0.1:{metrics_port}/metrics")[1], 30.0, "metrics", interval=0.1)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = out.splitlines()
    first = r"kiln demo on sqlite:///kiln-demo\.db \(migrated to \d+\)"
    assert re.fullmatch(first, lines[0]), lines[0]
    assert f"dashboard: http://127.0.0.1:{port}/" in out
    assert f"metrics:   http://127.0.0.1:{metrics_port}/metrics" in out
    summaries = [LINE.match(line) for line in lines if line.startswith("[")]
    assert len(summaries) >= 5 and all(summaries), lines
    assert lines[-1].startswith("[stopped after")
    last = summaries[-1]
    assert last is not None and int(last.group(1)) > 10

    rows = demo_jobs(tmp_path)
    by_kind: dict[str, list[JobRow]] = {}
    for row in rows:
        by_kind.setdefault(row.kind, []).append(row)
    assert any(r.state is JobState.COMPLETED for r in by_kind["demo.resize"])
    retried_then_ok = [r for r in by_kind["demo.email"]
                       if r.state is JobState.COMPLETED and r.errors]
    assert retried_then_ok and retried_then_ok[0].attempt == len(retried_then_ok[0].errors) + 1
    failed = [r for r in by_kind["demo.webhook"] if r.state is JobState.FAILED]
    assert failed and [e.attempt for e in failed[0].errors] == [1, 2, 3]
    reports = [r for r in by_kind["demo.report"] if r.state is JobState.COMPLETED]
    assert reports and reports[0].params["page"] == reports[0].args["pages"]
    delayed = by_kind["demo.reminder"][-1]  # the first one, enqueued at start
    assert (delayed.run_at - delayed.created_at).total_seconds() >= 5
    assert not [r for r in rows if r.state is JobState.RUNNING]  # all handed back or done


def test_demo_stops_on_ctrl_c_and_runs_again(tmp_path: Path) -> None:
    proc, _port, _metrics_port = start_demo(tmp_path)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while not line.startswith("[") and time.monotonic() < deadline:
            line = proc.stdout.readline()
        assert LINE.match(line.rstrip("\n")), line
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.splitlines()[-1].startswith("[stopped after")
    again = run_cli("demo", "--duration", "1", "--port", str(free_port()), "--metrics-port",
                    str(free_port()), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[0] == "kiln demo on sqlite:///kiln-demo.db"


def test_demo_rejects_bad_durations(tmp_path: Path) -> None:
    assert_fails(run_cli("demo", "--duration", "0", cwd=tmp_path), 2, "--duration")
    assert_fails(run_cli("demo", "--rate", "-1", cwd=tmp_path), 2, "--rate")
    assert list(tmp_path.iterdir()) == []
