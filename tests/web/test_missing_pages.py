"""Issue 44: a URL under a job that is no page answers 404 (not 405), an action's URL
fetched with GET says it takes a POST (405), and an action on a job that no longer
exists says so (404, nothing done), not "0 jobs requeued" on a page that 404s."""

from __future__ import annotations

import httpx
import pytest

from kiln import Client
from kiln._model._job import JobFilter
from tests.support.web import csrf_of, fail_jobs


async def test_no_page_under_a_job_is_404(http: httpx.AsyncClient, client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    for path in (f"/jobs/{job_id}/whatever", "/jobs/999999/whatever"):
        response = await http.get(path)
        assert response.status_code == 404, path
        assert "There is no such page" in response.text
    assert (await http.head(f"/jobs/{job_id}/whatever")).status_code == 404
    action = await http.get(f"/jobs/{job_id}/requeue")
    assert action.status_code == 405 and action.headers["allow"] == "POST"
    assert "takes a POST" in action.text
    assert (await http.get("/jobs/x/whatever")).status_code == 400  # a bad id, as /jobs/x


@pytest.mark.parametrize("action", ["requeue", "cancel", "delete"])
async def test_an_action_on_a_deleted_job_says_it_is_gone(
        http: httpx.AsyncClient, client: Client, action: str) -> None:
    [job_id, other] = await fail_jobs(client, 2)
    page = await http.get(f"/jobs/{job_id}")  # the operator's page, then the job goes
    await client.delete(JobFilter(ids=(job_id,)))
    response = await http.post(f"/jobs/{job_id}/{action}", data={"csrf": csrf_of(page.text)})
    assert response.status_code == 404
    assert f"Job {job_id} no longer exists (deleted or pruned)" in response.text
    assert "Nothing was done" in response.text
    assert await client.get(other) is not None  # nothing else touched
    assert [e.count for e in await client._store.audit_list(10)] in ([0, 1], [1])


@pytest.mark.parametrize("action", ["requeue", "delete"])
async def test_a_selection_says_how_many_ticked_jobs_are_gone(
        http: httpx.AsyncClient, client: Client, action: str) -> None:
    ids = await fail_jobs(client, 3)
    page = await http.get("/jobs?state=failed")
    await client.delete(JobFilter(ids=(ids[0],)))  # gone before the click
    response = await http.post("/jobs/bulk", data={
        "csrf": csrf_of(page.text), "action": action, "state": "failed",
        "ids": [str(i) for i in ids]})
    assert response.status_code == 303
    location = response.headers["location"]
    assert f"done={action}&n=2&gone=1" in location
    shown = (await http.get(location)).text
    assert ("1 of the ticked jobs no longer exists (deleted or pruned since the page was "
            "shown).") in shown
    assert f"2 jobs {'requeued' if action == 'requeue' else 'deleted'}." in shown
    # none gone: no such note
    [fresh] = await fail_jobs(client, 1, queue="other")
    again = await http.post("/jobs/bulk", data={
        "csrf": csrf_of(page.text), "action": "cancel", "ids": [str(fresh)]})
    assert "gone" not in again.headers["location"]
