"""The dashboard's job page shows a completed job's stored result, escaped."""

from __future__ import annotations

import dataclasses
import json

import httpx

from kiln import Client
from kiln._model._job import JobResult, Outcome

SCRIPT = "<script>alert(1)</script>"


async def test_the_job_page_shows_the_result(http: httpx.AsyncClient, client: Client) -> None:
    ids = [await client.enqueue("k", {"i": i}, queue="q") for i in range(3)]
    rows = {r.id: r for r in await client._store.job_claim("q", ["k"], 3, "srv")}
    done = [JobResult(i, "srv", rows[i].attempt, Outcome.COMPLETED) for i in ids[:2]]
    done[0] = dataclasses.replace(done[0], result=json.dumps({"rows": 3, "html": SCRIPT}))
    assert (await client._store.job_results_apply(done)).applied == 2
    page = (await http.get(f"/jobs/{ids[0]}")).text
    assert '<pre class="json" id="result">' in page and "&#34;rows&#34;: 3" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    page = (await http.get(f"/jobs/{ids[1]}")).text
    assert "None stored: the handler returned nothing." in page
    page = (await http.get(f"/jobs/{ids[2]}")).text
    assert "None yet: a result is stored when the job completes." in page
