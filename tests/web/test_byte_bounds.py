"""Issue 44 N7 (part): a job page shows at most 64 Ki characters of each JSON value,
with "show all" and the JSON a link away; /api/jobs leaves out args, metadata and
results over 4 Ki characters (``cut`` says which and where they are whole)."""

from __future__ import annotations

import httpx

from kiln import Client
from kiln._model._job import JobFilter


async def test_large_values_are_bounded_with_a_link_to_the_whole(
        http: httpx.AsyncClient, client: Client) -> None:
    big = await client.enqueue("k", {"blob": "x" * 200_000}, queue="q",
                               metadata={"note": "y" * 5000})
    small = await client.enqueue("k", {"i": 1}, queue="q")
    page = await http.get(f"/jobs/{big}")
    assert page.status_code == 200 and len(page.text) < 100_000
    assert 'id="args-cut">Showing the first 65,536 of 200,' in page.text
    assert f'href="/jobs/{big}?full=1#args"' in page.text
    assert 'id="metadata-cut"' not in page.text  # 5,000 characters are shown whole
    whole = await http.get(f"/jobs/{big}?full=1")
    assert "x" * 200_000 in whole.text and 'id="args-cut"' not in whole.text
    assert "data-refresh" not in whole.text  # a whole value is not reloaded every 5 s
    listed = (await http.get("/api/jobs?queue=q")).json()["jobs"]
    by_id = {j["id"]: j for j in listed}
    assert by_id[big]["args"] is None and by_id[big]["metadata"] is None
    cut = by_id[big]["cut"]
    assert set(cut["bytes"]) == {"args", "metadata"} and cut["whole"] == f"/api/jobs/{big}"
    assert 200_000 < cut["bytes"]["args"] < 200_020  # as the store's JSON text
    assert 5_000 < cut["bytes"]["metadata"] < 5_020
    assert by_id[small]["args"] == {"i": 1} and "cut" not in by_id[small]
    assert len((await http.get("/api/jobs?queue=q")).content) < 20_000
    full = (await http.get("/api/jobs?queue=q&full=1")).json()["jobs"]
    assert {j["id"]: j for j in full}[big]["args"] == {"blob": "x" * 200_000}
    assert (await http.get(f"/api/jobs/{big}")).json()["args"] == {"blob": "x" * 200_000}


async def test_a_list_of_jobs_with_large_values_is_not_their_size(
        http: httpx.AsyncClient, client: Client) -> None:
    """The probe's case, smaller: 40 jobs with 250 KB of args each (10 MB) and a large
    error record. The store reads them brief (a stand-in per large value, not the
    value), so neither the page nor /api/jobs carries them, and the API says what it
    cut and where the whole job is."""
    from kiln._model._job import NewJob

    blob = {"blob": "z" * 250_000}
    await client.enqueue_many([NewJob(kind="big.k", args=blob, queue="bigq")
                               for _ in range(40)])
    listed = await client.list(JobFilter(queue="bigq"), limit=100, brief=True)
    assert len(listed) == 40 and all(r.args is None and "args" in r.cut for r in listed)
    page = await http.get("/jobs?queue=bigq&limit=500")
    assert page.status_code == 200 and page.text.count('name="ids"') == 40
    assert len(page.content) < 100_000
    # each row says its args were left out, how large they are, and links its job
    assert page.text.count('<a class="cut" href="/jobs/') == 40
    assert "args: 250,0" in page.text
    api = await http.get("/api/jobs?queue=bigq&limit=500")
    assert len(api.json()["jobs"]) == 40 and len(api.content) < 60_000
    assert all(j["cut"]["bytes"]["args"] > 250_000 for j in api.json()["jobs"])


async def test_the_queues_page_and_api_page_fifty_queues_at_a_time(
        http: httpx.AsyncClient, client: Client) -> None:
    """N7: 312 queues were a 3 MB page refreshed every 5 s. Pages of 50, a name filter,
    and no empty sparkline for a queue that completed nothing in the hour."""
    from kiln._model._job import NewJob

    await client.enqueue_many([NewJob(kind="k", args={}, queue=f"q{i:03d}")
                               for i in range(120)])
    first = await http.get("/queues")
    assert first.status_code == 200
    assert first.text.count('<tr data-queue="') == 50
    assert 'id="queue-range">Queues 1\N{EN DASH}50 of 120' in first.text
    assert 'href="/queues?page=2" rel="next"' in first.text
    assert "<svg" not in first.text  # no queue completed anything
    assert len(first.content) < 250_000
    last = await http.get("/queues?page=3")
    assert last.text.count('<tr data-queue="') == 20 and 'rel="next"' not in last.text
    assert 'data-queue="q119"' in last.text and 'data-queue="q000"' not in last.text
    beyond = await http.get("/queues?page=99")  # past the end: the last page
    assert beyond.text.count('<tr data-queue="') == 20
    found = await http.get("/queues?name=Q11")
    assert found.text.count('<tr data-queue="') == 10 and 'id="queue-range"' not in found.text
    for bad in ("0", "x", "-1"):
        assert (await http.get(f"/queues?page={bad}")).status_code == 400
    api = (await http.get("/api/queues")).json()
    assert len(api["queues"]) == 50 and api["total"] == 120 and api["next"] == "page=2"
    rest = (await http.get(f"/api/queues?{api['next']}")).json()
    assert rest["queues"][0]["name"] == "q050" and rest["next"] == "page=3"
    assert (await http.get("/api/queues?page=3")).json()["next"] is None
