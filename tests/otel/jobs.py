"""The job kinds the kilnotel tests run: each is named for the outcome it produces."""

from __future__ import annotations

import asyncio
import time

import kiln


def make_app(url: str) -> kiln.App:
    app = kiln.App(url)

    @app.job("ok")
    async def ok(job: kiln.Job) -> None:
        return None

    @app.job("sync_ok")
    def sync_ok(job: kiln.Job) -> None:
        return None

    @app.job("slow")
    async def slow(job: kiln.Job) -> None:
        await asyncio.sleep(0.3)

    @app.job("flaky", max_attempts=5, backoff=kiln.Constant(0.05))
    async def flaky(job: kiln.Job) -> None:
        if job.attempt < 3:
            raise RuntimeError(f"flaky failure on attempt {job.attempt}")

    @app.job("doomed", max_attempts=2, backoff=kiln.Constant(0.05))
    def doomed(job: kiln.Job) -> None:
        raise ValueError("doomed to fail")

    @app.job("long", queue="long")
    async def long(job: kiln.Job) -> None:
        await asyncio.sleep(float(job.args.get("seconds", 30)))

    @app.job("limited", queue="limited", rate_limit=kiln.RateLimit(rate=4, per=1.0))
    async def limited(job: kiln.Job) -> None:
        return None

    @app.job("busy")
    def busy(job: kiln.Job) -> None:
        time.sleep(float(job.args.get("seconds", 0.05)))

    return app
