"""The wake-up protocol (kiln._model._wakeup): every payload kiln sends is read back as what
it means, and a queue named like a control payload is still woken by its jobs."""

from __future__ import annotations

import pytest

import kiln
from kiln._model._wakeup import (
    CANCEL_PAYLOAD,
    CONTROLS_PAYLOAD,
    Wakeup,
    WakeupKind,
    parse,
    scheduled,
)
from tests.integration.inprocess import Running, config
from tests.support.waits import wait_for


@pytest.mark.parametrize(("payload", "expected"), [
    ("mail", Wakeup(WakeupKind.QUEUE)),
    (CANCEL_PAYLOAD, Wakeup(WakeupKind.CANCEL)),
    (CONTROLS_PAYLOAD, Wakeup(WakeupKind.CONTROLS)),
    (scheduled(1765000000.25), Wakeup(WakeupKind.SCHEDULED, 1765000000.25)),
    ("scheduled:12.5", Wakeup(WakeupKind.SCHEDULED, 12.5)),  # PostgreSQL's extract(epoch)
    ("scheduled:soon", Wakeup(WakeupKind.QUEUE)),  # not a time: a queue's name
])
def test_each_payload_reads_as_what_it_means(payload: str, expected: Wakeup) -> None:
    assert parse(payload) == expected


@pytest.mark.parametrize("queue", [CONTROLS_PAYLOAD, "scheduled:12.5"])
async def test_a_queue_named_like_a_payload_is_woken_by_its_jobs(
        store_url: str, queue: str) -> None:
    app = kiln.App(store_url, bus=kiln.InProcessBus())

    @app.job("k", queue=queue)
    async def handler(job: kiln.Job) -> None:
        return None

    await app.amigrate()
    # the pool's first claim found nothing and it looks again only after 60 s: a start
    # within 10 s is the wake-up (it failed before on SQLite and MariaDB, which read
    # such a payload as the control it looks like and woke no pool)
    running = await Running(app.server({queue: 1}, config(poll_interval=60))).started()
    try:
        job_id = await app.aenqueue("k", {})
        await wait_for(lambda: running.finished(job_id) or None, 10, "the job to run")
    finally:
        await running.stop()
        await app.aclose()
