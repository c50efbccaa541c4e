"""CPU accounting for benchmarks: user+system seconds of processes, read from /proc."""

from __future__ import annotations

import os

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def pids_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip().startswith(name):
                        found.append(int(entry))
            except OSError:
                continue
    return found


def snapshot(name: str) -> dict[int, float]:
    return {pid: cpu_seconds(pid) for pid in pids_named(name)}


def delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
