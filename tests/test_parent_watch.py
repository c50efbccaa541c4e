"""Worker processes that tests start exit once the run that started them is gone
(tests/plugins/parent.py): a run killed before it stopped its workers leaves none behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = ("import time; from tests.plugins.parent import exit_with_parent;"
         " exit_with_parent(0.05); print('ready', flush=True); time.sleep(60)")
# the parent starts the child in a session of its own (as the chaos cluster does), waits
# until it watches, tells us its pid and exits without stopping it
PARENT = ("import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', sys.argv[1]],"
          " stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,"
          " start_new_session=True);"
          " assert p.stdout.readline() == 'ready\\n'; print(p.pid)")


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"  # exited, not yet reaped by whoever adopted it


def test_a_worker_exits_once_its_parent_is_gone() -> None:
    done = subprocess.run([sys.executable, "-c", PARENT, CHILD], capture_output=True,
                          text=True, cwd=ROOT, timeout=30,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr
    child = int(done.stdout)
    deadline = time.monotonic() + 10
    while not gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(child), f"process {child} outlived its parent"
