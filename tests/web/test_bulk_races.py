"""Issue 44 N2: every "all matching" action acts on exactly the set its confirmation
counted and showed, or refuses with "the set changed: N now match" (a 409 with a fresh
confirmation) when a job entered or left that set between confirm and act."""

from __future__ import annotations

import dataclasses
import html

import httpx

from kiln import Client
from kiln._model._job import JobFilter, JobState
from tests.support.web import fail_jobs, fail_running, hidden_fields, running_job


async def test_delete_all_refuses_when_a_running_job_failed_in_between(
        http: httpx.AsyncClient, client: Client) -> None:
    """The probe's case: "Delete 2 jobs" on the All tab deleted 3."""
    runner = await running_job(client)  # older than the jobs shown: under the id bound
    shown = await fail_jobs(client, 2, queue="race", kind="race.fail")
    confirm = await http.get("/jobs/all/delete?queue=race")
    assert '<strong id="confirm-count">2</strong>' in confirm.text
    await fail_running(client, runner)  # the running job fails between confirm and act
    refused = await http.post("/jobs/all/delete", data=hidden_fields(confirm.text))
    assert refused.status_code == 409
    said = html.unescape(refused.text)
    assert "The set changed: 3 now match (this page showed 2). Nothing was deleted" in said
    assert None not in [await client.get(i) for i in [*shown, runner]]
    assert [e for e in await client._store.audit_list(10) if e.action == "delete"] == []
    # the refusal is a fresh confirmation of the set that matches now
    assert '<strong id="confirm-count">3</strong>' in refused.text
    done = await http.post("/jobs/all/delete", data=hidden_fields(refused.text))
    assert done.status_code == 303 and done.headers["location"].endswith("done=delete&n=3")
    [entry] = [e for e in await client._store.audit_list(10) if e.action == "delete"]
    assert (entry.count, entry.detail["total"]) == (3, 3)


async def test_cancel_all_refuses_when_a_job_left_and_another_entered(
        http: httpx.AsyncClient, client: Client) -> None:
    """Same count, another set: a count check alone would let this through."""
    [older] = await fail_jobs(client, 1, queue="race", kind="race.fail")
    shown = [await client.enqueue("race.fail", {"i": i}, queue="race") for i in range(2)]
    confirm = await http.get("/jobs/all/cancel?queue=race&state=available")
    assert '<strong id="confirm-count">2</strong>' in confirm.text
    [claimed] = await client._store.job_claim("race", ["race.fail"], 1, "web-test-server")
    assert claimed.id == shown[0]  # one shown job left the set: it runs now
    assert await client.requeue(JobFilter(ids=(older,))) == 1  # an older one entered it
    refused = await http.post("/jobs/all/cancel", data=hidden_fields(confirm.text))
    assert refused.status_code == 409
    assert "The set changed: 2 now match (this page showed 2)" in html.unescape(refused.text)
    states = [(await client.get(i)).state for i in (older, *shown)]  # type: ignore[union-attr]
    assert states == [JobState.AVAILABLE, JobState.RUNNING, JobState.AVAILABLE]


async def test_requeue_all_on_the_failed_tab_refuses_a_changed_set(
        http: httpx.AsyncClient, client: Client) -> None:
    shown = await fail_jobs(client, 2, queue="race", kind="race.fail")
    confirm = await http.get("/jobs/requeue-all?state=failed&queue=race")
    assert '<strong id="confirm-count">2</strong>' in confirm.text
    assert await client.delete(JobFilter(ids=(shown[0],))) == 1  # a colleague deleted one
    refused = await http.post("/jobs/requeue-all", data=hidden_fields(confirm.text))
    assert refused.status_code == 409 and "Requeue failed jobs" in refused.text
    assert "The set changed: 1 now match" in html.unescape(refused.text)
    assert (await client.get(shown[1])).state is JobState.FAILED  # type: ignore[union-attr]


async def test_a_run_touches_only_the_ids_it_checked(
        http: httpx.AsyncClient, client: Client) -> None:
    """Unchanged at the check, the run touches only the ids it checked: a job that
    enters the set while the run goes is left alone (Bulk(only=...))."""
    from kiln._client import _bulk

    shown = await fail_jobs(client, 3, queue="race", kind="race.fail")
    bound = await _bulk.bound(client, JobFilter(states=(JobState.FAILED,), queue="race"))
    ids = await _bulk.matching_ids(client, bound)
    assert sorted(ids) == sorted(shown)
    runner = await running_job(client)  # newer than the bound: moved under it by hand
    bulk = _bulk.Bulk(client, "delete", dataclasses.replace(bound, max_id=runner,
                                                           finished_before=None),
                      len(ids), only=ids)
    await fail_running(client, runner)  # matches the (widened) filter now, but was not shown
    progress = await bulk.run()
    assert progress.done == 3 and await client.get(runner) is not None


async def test_a_confirmation_counts_in_the_database_and_reads_no_id_out(
        http: httpx.AsyncClient, client: Client) -> None:
    """At a million jobs a confirmation over 100,000 read every id into Python (about
    200 ms per 100,000): it is one aggregate now (job_id_sums), whose fingerprint the
    action's check of the ids it will act on must equal."""
    shown = await fail_jobs(client, 3, queue="sums", kind="race.fail")
    store = client._store
    calls: list[str] = []
    listed, summed = store.job_ids, store.job_id_sums

    async def ids(*args: object, **kwargs: object) -> list[int]:
        calls.append("job_ids")
        return await listed(*args, **kwargs)  # type: ignore[arg-type]

    async def sums(*args: object, **kwargs: object) -> tuple[int, int, int, int, int]:
        calls.append("job_id_sums")
        return await summed(*args, **kwargs)  # type: ignore[arg-type]

    store.job_ids, store.job_id_sums = ids, sums  # type: ignore[method-assign]
    confirm = await http.get("/jobs/all/delete?queue=sums&state=failed")
    assert '<strong id="confirm-count">3</strong>' in confirm.text
    assert calls == ["job_id_sums"]
    done = await http.post("/jobs/all/delete", data=hidden_fields(confirm.text))
    assert done.status_code == 303 and done.headers["location"].endswith("done=delete&n=3")
    assert [await client.get(i) for i in shown] == [None, None, None]
