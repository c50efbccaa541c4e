"""Idle pickup latency on PostgreSQL: kiln side by side with pgqueuer and procrastinate.

From the moment the enqueue call returns (committed) to the moment the handler starts,
one job every 50 ms into an idle worker process, a few hundred jobs, each system on its
own fresh database of the same PostgreSQL server and with its own LISTEN/NOTIFY. The
enqueuer and the worker are separate processes on this host, both stamping
``time.time()``. Twenty warm-up jobs are not counted. A lag can be negative: the
notification leaves the database with the commit, so a worker can start the job before
the enqueuing process has been scheduled to see its own commit return. Prints one JSON object per
system and run, then a summary: medians over the runs, and each peer's p50 and p99 as
multiples of kiln's in the same runs. kiln's goal is under 1 ms p50 and under 3 ms p99.

``kiln_every`` is kiln with a NOTIFY on every enqueue (``notify_window=0``; ``kiln`` has
the store's default, the notify limiter's 10 ms window): at ``--interval 0.002`` most of
kiln's enqueues fall inside a window and wait for the wake-up owed at its end.

The peers run from their own virtualenv (``--peers-venv``, default $KILN_PEERS_VENV or
/tmp/kiln-peers, created with bench/peers/setup.sh when missing).

``--worker-sync-commit off`` runs every system's worker sessions (not the enqueuer's)
with synchronous_commit off: claims and results then return before their WAL flush,
which on this machine's disk is most of a millisecond.

    python -m bench.bench_latency [--jobs 300] [--interval 0.05] [--runs 3]
                                  [--systems kiln,pgqueuer,procrastinate]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_drain import PEERS, PG, drop_database, fresh_database

ROOT = Path(__file__).resolve().parents[1]
WARMUP = 20


def peers_python(venv: str) -> str:
    python = Path(venv) / "bin" / "python"
    check = [str(python), "-c", "import pgqueuer, procrastinate, asyncpg"]
    if not python.exists() or subprocess.run(check, capture_output=True).returncode != 0:
        subprocess.run(["bash", str(ROOT / "bench/peers/setup.sh"), venv], check=True,
                       stdout=subprocess.DEVNULL)
    return str(python)


def commands(system: str, python: str) -> list[str]:
    if system == "kiln":  # the store's default: the notify limiter on (10 ms window)
        return [sys.executable, "-m", "bench.latency_kiln"]
    if system == "kiln_every":  # a NOTIFY with every enqueue (notify_window=0)
        return [sys.executable, "-m", "bench.latency_kiln", "--window", "0"]
    return [python, str(ROOT / f"bench/peers/latency_{system}.py")]


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


def enqueue(cmd: list[str], url: str, n: int, interval: float, first: int) -> list[float]:
    """Enqueue jobs first..first+n-1; return when each enqueue call returned."""
    done = subprocess.run([*cmd, url, "enqueue", str(n), str(interval), str(first)],
                          capture_output=True,
                          text=True, cwd=ROOT, timeout=n * interval + 120, check=True)
    returned: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return returned


def read_log(log: Path) -> dict[int, float]:
    started = {}
    for line in log.read_text().splitlines():
        n, at = line.split()
        started[int(n)] = float(at)
    return started


def wait_log(log: Path, want: int, timeout: float) -> dict[int, float]:
    deadline = time.monotonic() + timeout
    while True:
        started = read_log(log) if log.exists() else {}
        if len(started) >= want or time.monotonic() > deadline:
            return started
        time.sleep(0.05)


def worker_url(system: str, url: str, sync_commit: str) -> str:
    if sync_commit == "on":
        return url
    if system == "pgqueuer":  # asyncpg passes unknown DSN parameters as server settings
        return f"{url}?synchronous_commit={sync_commit}"
    return f"{url}?options=-csynchronous_commit%3D{sync_commit}"  # libpq, for psycopg


def run_system(
    system: str, python: str, jobs: int, interval: float, sync_commit: str
) -> dict[str, Any]:
    url = fresh_database(f"kiln_lat_{system}")
    cmd = commands(system, python)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "starts.log"
        worker = subprocess.Popen(
            [*cmd, worker_url(system, url, sync_commit), "work", str(log)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )
        try:
            assert worker.stdout is not None
            ready = worker.stdout.readline()
            if not ready.startswith("READY"):
                return {"system": system, "error": f"worker did not start: {ready!r}"}
            enqueue(cmd, url, WARMUP, interval, 0)
            wait_log(log, WARMUP, 30)
            time.sleep(1.0)  # idle again
            returned = enqueue(cmd, url, jobs, interval, WARMUP)
            started = wait_log(log, WARMUP + jobs, 30)
        finally:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
            drop_database(url)
    lags = [(started[WARMUP + i] - at) * 1000 for i, at in enumerate(returned)
            if WARMUP + i in started]
    if not lags:
        return {"system": system, "error": "no job started"}
    return {
        "system": system, "jobs": jobs, "started": len(lags), "interval_ms": interval * 1000,
        "worker_synchronous_commit": sync_commit,
        "p50_ms": round(statistics.median(lags), 3), "p90_ms": round(quantile(lags, 0.9), 3),
        "p99_ms": round(quantile(lags, 0.99), 3), "max_ms": round(max(lags), 3),
        "min_ms": round(min(lags), 3),
    }


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs of each system, and each peer's figures as multiples of
    kiln's from the same runs (a ratio per run, then their median)."""
    by_system: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        if "p50_ms" in r:
            by_system.setdefault(r["system"], []).append(r)
    summary: dict[str, Any] = {
        system: {k: round(statistics.median(r[k] for r in runs), 3) for k in ("p50_ms", "p99_ms")}
        for system, runs in by_system.items()
    }
    kiln_runs = by_system.get("kiln", [])
    for system, runs in by_system.items():
        if system == "kiln" or len(runs) != len(kiln_runs):
            continue
        for k in ("p50_ms", "p99_ms"):
            ratios = [peer[k] / ours[k] for peer, ours in zip(runs, kiln_runs, strict=True)]
            summary[system][f"{k}_vs_kiln"] = round(statistics.median(ratios), 2)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--systems", default="kiln,pgqueuer,procrastinate")
    parser.add_argument("--runs", type=int, default=1, help="interleaved rounds of all systems")
    parser.add_argument("--peers-venv", default=PEERS)
    parser.add_argument("--worker-sync-commit", choices=("on", "off"), default="on")
    args = parser.parse_args()
    systems = args.systems.split(",")
    python = peers_python(args.peers_venv) if set(systems) - {"kiln"} else sys.executable
    results = []
    for run in range(args.runs):
        for system in systems:
            result = run_system(system, python, args.jobs, args.interval,
                                args.worker_sync_commit)
            result["run"] = run + 1
            print(json.dumps(result), flush=True)
            results.append(result)
    summary = summarise(results)
    kiln = summary.get("kiln", {})
    goal = {"p50_ms": 1.0, "p99_ms": 3.0}
    print(json.dumps({"database": PG.rsplit("@", 1)[-1], "runs": args.runs, "summary": summary,
                      "kiln_goal": goal, "kiln_meets_goal": bool(kiln) and all(
                          (kiln.get(k) or 1e9) < v for k, v in goal.items())}))


if __name__ == "__main__":
    main()
