"""The App whose workers publish kind declarations for tests/integration/test_kinds.py.

Every kind is served on queue ``mail`` only: a job of these kinds that lands in
``default`` is never claimed, which is the defect those tests reproduce.
"""

from __future__ import annotations

import os

import kiln

app = kiln.App(os.environ.get("KILN_DATABASE_URL", "sqlite:///kiln-test.db"))


@app.job("t.boom", queue="mail", max_attempts=3, backoff=kiln.Constant(0.01))
async def boom(job: kiln.Job) -> None:
    raise RuntimeError(f"boom on attempt {job.attempt}")


@app.job("mail.send", queue="mail", priority=3)
async def send(job: kiln.Job) -> None:
    return None


# one admission per hour: the first job runs, the second stays pending
@app.job("t.limited", queue="mail", rate_limit=kiln.RateLimit(1, per=3600))
async def limited(job: kiln.Job) -> None:
    return None


# one report per tenant at a time, whoever enqueues it
@app.job("report.build", queue="mail", unique=kiln.Unique(by=("args.tenant",)))
async def report(job: kiln.Job) -> None:
    return None
