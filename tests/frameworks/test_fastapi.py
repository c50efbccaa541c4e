"""kiln.contrib.fastapi / starlette: the lifespan opens and closes the app's client;
the dashboard under a prefix answers only to whom the host's auth dependency admits,
and records that user in the audit log."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from starlette.applications import Starlette
from starlette.routing import Mount

import kiln
import kiln.web
from kiln.contrib.fastapi import lifespan, mount_dashboard
from kiln.contrib.starlette import guarded
from kiln.stores import Store
from tests.frameworks.asgi import BASE_URL, served

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


@pytest.fixture
def jobs(store_url: str) -> Iterator[kiln.App]:
    yield from _jobs(store_url)


@pytest.fixture
def local_jobs(tmp_path: Path) -> Iterator[kiln.App]:
    """The dashboard's side does not depend on the database: SQLite only."""
    yield from _jobs(f"sqlite:///{tmp_path / 'kiln.db'}")


def _jobs(url: str) -> Iterator[kiln.App]:
    app = kiln.App(url)
    app.register("email.send", lambda job: None)
    app.migrate()
    yield app
    app.close()


def current_admin(x_user: str | None = Header(default=None)) -> str:
    if x_user is None:
        raise HTTPException(401, "sign in first")
    if x_user != "alice":
        raise HTTPException(403, "admins only")
    return x_user


def build(jobs: kiln.App) -> FastAPI:
    api = FastAPI(lifespan=lifespan(jobs))

    @api.post("/signup")
    async def signup(request: Request, user: str = Depends(current_admin)) -> dict[str, int]:
        job = await request.state.kiln.enqueue("email.send", {"to": user})
        return {"job": int(job)}

    mount_dashboard(api, "/admin/kiln", kiln.web.create_app(jobs), user=current_admin)
    return api


async def test_lifespan_opens_and_closes_the_client(jobs: kiln.App, store: Store) -> None:
    async with served(build(jobs)) as http:
        assert len(jobs._clients) == 1  # the serving loop's client, opened at start-up
        response = await http.post("/signup", headers={"X-User": "alice"})
        job_id = response.json()["job"]
    assert not jobs._clients  # closed at shutdown
    job = await store.job_get(job_id)
    assert job is not None and job.args == {"to": "alice"}


async def test_dashboard_behind_the_auth_dependency(local_jobs: kiln.App) -> None:
    job_id = int(local_jobs.enqueue("email.send", {"to": "bob"}))
    async with served(build(local_jobs)) as http:
        assert (await http.get("/admin/kiln/")).status_code == 401
        assert (await http.get("/admin/kiln/jobs", headers={"X-User": "eve"})).status_code == 403
        as_alice = {"X-User": "alice"}
        moved = await http.get("/admin/kiln", headers=as_alice, follow_redirects=False)
        assert moved.status_code == 307 and moved.headers["location"] == "/admin/kiln/"
        page = await http.get(f"/admin/kiln/jobs/{job_id}", headers=as_alice)
        assert page.status_code == 200 and 'href="/admin/kiln/jobs' in page.text
        token = CSRF.search(page.text)
        assert token is not None
        refused = await http.post(f"/admin/kiln/jobs/{job_id}/cancel",
                            data={"csrf": token.group(1)}, headers={"X-User": "eve"})
        assert refused.status_code == 403  # the dependency refuses before the dashboard
        done = await http.post(f"/admin/kiln/jobs/{job_id}/cancel", data={"csrf": token.group(1)},
                         headers={**as_alice, "Origin": BASE_URL}, follow_redirects=False)
        assert done.status_code == 303, done.text
        audit = (await http.get("/admin/kiln/audit", headers=as_alice)).text
        assert "alice" in audit and "cancel" in audit


async def test_starlette_guarded_mount(local_jobs: kiln.App) -> None:
    async def user(request: Request) -> str | None:
        return request.headers.get("x-user")

    app = Starlette(routes=[Mount("/ops/kiln", guarded(kiln.web.create_app(local_jobs), user))],
                    lifespan=lifespan(local_jobs))
    async with served(app) as http:
        assert (await http.get("/ops/kiln/")).status_code == 401
        page = await http.get("/ops/kiln/", headers={"X-User": "carol"})
        assert page.status_code == 200 and 'href="/ops/kiln/jobs' in page.text


def test_prefix_is_checked(local_jobs: kiln.App) -> None:
    with pytest.raises(kiln.ConfigError, match="no trailing slash"):
        mount_dashboard(FastAPI(), "/kiln/", kiln.web.create_app(local_jobs), user=current_admin)
