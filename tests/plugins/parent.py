"""Worker processes that tests start exit once the test run that started them is gone.

A run killed before it could stop its workers (a cancelled CI job, a developer's
Ctrl-C twice, a SIGKILL) would leave them running for ever: the chaos workers start in
sessions of their own, so no signal to the run's process group reaches them, and one
left behind was seen loading the machine for an hour and more.
"""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(interval: float = 0.5) -> None:
    """Exit this process (status 70) once its parent process has gone. A thread, so a
    busy or stopped event loop does not keep it from noticing."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(70)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
