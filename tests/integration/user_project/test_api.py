"""The reports service's tests: a report and its job commit together or not at all,
and the dashboard answers only to admins."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from api.main import api, engine, jobs, reports

import kiln

ADMIN = {"Authorization": "Bearer user-admin"}
ALICE = {"Authorization": "Bearer user-alice"}


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    reports.metadata.create_all(engine)
    async with api.router.lifespan_context(api):
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            yield c


async def report_jobs(name: str) -> list[kiln.JobRow]:
    found = await jobs.client().list(kiln.JobFilter(kind="report.build"), limit=1000)
    return [j for j in found if j.args["name"] == name]


async def test_a_report_enqueues_its_build(http: httpx.AsyncClient) -> None:
    response = await http.post("/reports/q3", headers=ALICE)
    assert response.status_code == 201
    [job] = await report_jobs("q3")
    assert job.args == {"name": "q3", "by": "user-alice"}


async def test_a_rolled_back_report_has_no_job(http: httpx.AsyncClient) -> None:
    assert (await http.post("/reports/broken", headers=ALICE)).status_code == 422
    assert await report_jobs("broken") == []


async def test_the_dashboard_is_behind_the_admin_dependency(http: httpx.AsyncClient) -> None:
    assert (await http.post("/reports/q4", headers=ALICE)).status_code == 201
    assert (await http.get("/admin/kiln/")).status_code == 401
    assert (await http.get("/admin/kiln/", headers=ALICE)).status_code == 403
    page = await http.get("/admin/kiln/jobs", headers=ADMIN)
    assert page.status_code == 200 and "report.build" in page.text
