"""A kind's declared tags hold for every producer (issue 14, part 4): the ``kiln`` CLI
and a handler-less ``kiln.App`` in another process tag its jobs as the declaration
says; tags given at enqueue replace the declared ones, as every option does."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap

import kiln
from tests.integration.inprocess import job_of
from tests.plugins.workers import ROOT
from tests.support.cli import cli_env, ok

PRODUCER = textwrap.dedent("""
    import json, os
    import kiln

    app = kiln.App(os.environ["KILN_DATABASE_URL"])  # no handlers: a web service, say
    ids = [app.enqueue("t.tagged", {}), app.enqueue("t.tagged", {}, tags=["adhoc"]),
           *app.enqueue_many([("t.tagged", {})])]
    app.close()
    print(json.dumps(ids))
""")


def _run(*argv: str, url: str) -> str:
    proc = subprocess.run(
        [sys.executable, *argv], env=cli_env(KILN_DATABASE_URL=url, PYTHONPATH=str(ROOT)),
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )
    return ok(proc)


async def test_declared_tags_hold_for_the_cli_and_a_handler_less_client(
    store_url: str,
) -> None:
    workers = kiln.App(store_url)
    workers.register("t.tagged", lambda job: None, queue="mail", tags=["billing", "nightly"])
    workers.migrate()
    server = workers.server({"mail": 1})
    await server._store.open()
    try:
        await server._store.server_register(server.info)
        await server.publish_kinds()
        cli = int(await asyncio.to_thread(_run, "-m", "kiln.cli", "enqueue", "t.tagged",
                                          url=store_url))
        given = int(await asyncio.to_thread(_run, "-m", "kiln.cli", "enqueue", "t.tagged",
                                            "--tag", "manual", url=store_url))
        plain, replaced, many = json.loads(
            await asyncio.to_thread(_run, "-c", PRODUCER, url=store_url))
        client = kiln.Client(server._store)
        tags = {i: (await job_of(server._store, i)).tags
                for i in (cli, given, plain, replaced, many)}
        assert tags == {cli: ["billing", "nightly"], given: ["manual"],
                        plain: ["billing", "nightly"], replaced: ["adhoc"],
                        many: ["billing", "nightly"]}
        tagged = kiln.JobFilter(tags=("billing",), queue="mail")
        assert sorted(r.id for r in await client.list(tagged)) == sorted([cli, plain, many])
    finally:
        await server._store.server_deregister(server.info.id)
        await server._store.close()
        workers.close()
