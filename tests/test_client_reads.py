"""docs/guide.md, "Reading the fleet from a client": the block runs as written, from a
client that holds no handlers, and reads what a running server and its jobs show."""

from __future__ import annotations

import textwrap
from typing import Any

import kiln
from tests.integration.inprocess import Running, config
from tests.support.docblocks import blocks_under_test
from tests.support.waits import wait_for


def block() -> str:
    return blocks_under_test("guide.md", __file__)[0]


async def _run(code: str, url: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {"kiln": kiln, "url": url}
    exec(f"async def _block():\n{textwrap.indent(code, '    ')}\n    return locals()",
         namespace)
    result: dict[str, Any] = await namespace["_block"]()
    return result


async def test_the_guides_reads_show_the_fleet(store_url: str) -> None:
    app = kiln.App(store_url)

    @app.job("mail.send", queue="mail", max_attempts=7,
             rate_limit=kiln.RateLimit(50, per=60))
    async def send(job: kiln.Job) -> None:
        return None

    await app.amigrate()
    running = await Running(app.server({"mail": 2}, config())).started()
    try:
        await wait_for(lambda: running.server.is_leader, 10, "leadership")
        client = app.client()
        await client.pause_queue("mail", actor="ops")  # the jobs below wait: counted
        ids = [await client.enqueue("mail.send", {"i": i}) for i in range(3)]
        seen = await _run(block(), store_url)
    finally:
        await running.stop()
        await app.aclose()

    assert [s.id for s in seen["servers"]] == [running.server.id]
    assert seen["leader"] == running.server.id
    waiting = {(c.queue, c.state): c.count for c in seen["counts"]}
    assert waiting[("mail", kiln.JobState.PENDING)] + waiting.get(
        ("mail", kiln.JobState.AVAILABLE), 0) == len(ids)  # pending until admitted
    assert sum(n for kind, _state, n in seen["by_kind"] if kind == "mail.send") == len(ids)
    assert isinstance(seen["oldest"], dict) and isinstance(seen["finished"], dict)
    [kind] = [k for k in seen["kinds"] if k.declaration.kind == "mail.send"]
    options = kind.declaration.options
    assert (options["max_attempts"], options["queue"], kind.live) == (7, "mail", True)
    assert [(key, limit.rate) for key, limit, _n in seen["limits"]] == [("mail.send", 50)]
    assert seen["controls"].paused("mail")
    assert seen["audit"][0].action == "queue_pause" and seen["audit"][0].actor == "ops"
    assert seen["mine"] == []  # nobody called alice requeued anything
    assert all(e.id < seen["audit"][-1].id for e in seen["older"])
    assert "kiln_jobs" in {t.table for t in seen["sizes"]}
