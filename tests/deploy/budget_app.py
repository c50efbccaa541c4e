"""The app of the connection-budget test: ``kiln worker tests.deploy.budget_app:app``.

``budget.checkpoint`` writes a checkpoint (a pool connection for each running job) and
sleeps; ``budget.fanout`` enqueues through the App's own client, which opens a store
(and pool) of its own beside the server's.
"""

from __future__ import annotations

import asyncio

import kiln

app = kiln.App()  # KILN_DATABASE_URL


@app.job("budget.checkpoint", queue="budget")
async def checkpoint(job: kiln.Job) -> None:
    for step in range(3):
        await job.set_param("step", step)
        await asyncio.sleep(0.02)


@app.job("budget.fanout", queue="budget")
async def fanout(job: kiln.Job) -> None:
    await app.aenqueue("budget.checkpoint", {"from": job.id}, queue="budget")
