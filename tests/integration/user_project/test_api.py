"""The reports service's tests: a report and its job commit together or not at all,
the build checkpoints its pages, and the dashboard answers only to admins.

The service's sessions and its kiln App both go to the test's own database (the
plugin's ``kiln_database_url``): the App through ``kiln.testing.bound``, the sessions
through FastAPI's dependency override."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from api.main import api, get_session, jobs, make_engine, reports
from sqlalchemy.orm import Session

import kiln
from kiln.testing import KilnJobs, bound

ADMIN = {"Authorization": "Bearer user-admin"}
ALICE = {"Authorization": "Bearer user-alice"}


@pytest.fixture
def kiln_app(kiln_database_url: str) -> Iterator[kiln.App]:
    """The service's App on the test database (pytest.ini's kiln_app is the shop's)."""
    with bound(jobs, kiln_database_url):
        yield jobs


@pytest.fixture
async def http(kiln_app: kiln.App, kiln_database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    engine = make_engine(kiln_database_url)
    reports.metadata.create_all(engine)

    def test_session() -> Iterator[Session]:
        with Session(engine) as session:
            yield session

    api.dependency_overrides[get_session] = test_session
    try:
        async with api.router.lifespan_context(api):
            transport = httpx.ASGITransport(app=api)
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1") as client:
                yield client
    finally:
        api.dependency_overrides.clear()
        engine.dispose()


async def test_a_report_enqueues_its_build(http: httpx.AsyncClient, kiln_jobs: KilnJobs) -> None:
    response = await http.post("/reports/q3", headers=ALICE)
    assert response.status_code == 201
    [job] = kiln_jobs.assert_enqueued("report.build", args={"name": "q3"}, count=1)
    assert job.args == {"name": "q3", "by": "user-alice"} and job.id == response.json()["job"]


async def test_a_rolled_back_report_has_no_job(http: httpx.AsyncClient,
                                               kiln_jobs: KilnJobs) -> None:
    assert (await http.post("/reports/broken", headers=ALICE)).status_code == 422
    kiln_jobs.refute_enqueued("report.build")


async def test_the_build_runs_and_checkpoints(http: httpx.AsyncClient,
                                              kiln_jobs: KilnJobs) -> None:
    assert (await http.post("/reports/q1", headers=ALICE)).status_code == 201
    drained = await kiln_jobs.adrain()
    assert (drained.completed, drained.failed) == (1, 0)
    kiln_jobs.refute_enqueued()
    [done] = kiln_jobs.enqueued_jobs("report.build", state="completed")
    assert done.params == {"pages": 3}


def test_a_build_resumes_from_its_checkpoint(kiln_jobs: KilnJobs) -> None:
    done = kiln_jobs.perform("report.build", {"name": "q2", "by": "user-alice"},
                             params={"pages": 2})
    assert done.outcome == "completed" and done.params == {"pages": 3}


async def test_the_dashboard_is_behind_the_admin_dependency(http: httpx.AsyncClient) -> None:
    assert (await http.post("/reports/q4", headers=ALICE)).status_code == 201
    assert (await http.get("/admin/kiln/")).status_code == 401
    assert (await http.get("/admin/kiln/", headers=ALICE)).status_code == 403
    page = await http.get("/admin/kiln/jobs", headers=ADMIN)
    assert page.status_code == 200 and "report.build" in page.text
