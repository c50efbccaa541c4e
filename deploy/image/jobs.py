"""The example app that deploy/'s files run: ``kiln worker jobs:app``.

Replace it with your own module (any ``module:attribute`` naming a kiln.App). The
database URL comes from KILN_DATABASE_URL, which every deploy file sets from a secret.
A recurring job every 30 seconds gives the dashboards something to show.
"""

from __future__ import annotations

import asyncio
import os
import random

import kiln

# KILN_DATABASE_URL; KILN_MAX_CONNS: the pool of each of its stores (2 behind PgBouncer)
app = kiln.App(max_conns=int(os.environ.get("KILN_MAX_CONNS", "8")))


@app.job("example.tick", queue="default", timeout=60)
async def tick(job: kiln.Job) -> None:
    for n in range(int(job.args.get("fan_out", 5))):
        await app.aenqueue("example.work", {"n": n})


@app.job("example.work", queue="default", max_attempts=5, backoff=kiln.Exponential(2, 60))
async def work(job: kiln.Job) -> None:
    await asyncio.sleep(random.uniform(0.05, 0.5))
    if random.random() < 0.05:
        raise RuntimeError("an example failure, retried with backoff")


app.schedule("example.tick", "example.tick", {"fan_out": 5}, every=30)
