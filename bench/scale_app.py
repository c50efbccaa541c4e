"""The app that ``bench/bench_scale.py`` runs with ``kiln worker bench.scale_app:app``.

One no-op kind on the default queue; the database comes from ``--database-url``.
"""

from __future__ import annotations

import os

import kiln

KIND = "scale.work"

app = kiln.App(os.environ.get("KILN_DATABASE_URL", "sqlite:///kiln-scale.db"))


@app.job(KIND)
async def work(job: kiln.Job) -> None:
    return None
