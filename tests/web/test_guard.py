"""The Guard covers every route, including routes added after create_app (a JSON API):
Host allowlist, authentication, same-origin, read-only and CSRF, whatever the body's
encoding; a body too large for a form is refused before it is parsed."""

from __future__ import annotations

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kiln import Client
from kiln.web import create_app
from kiln.web._dashboard import Dashboard
from kiln.web._guard import MAX_BODY
from tests.support.web import BASE_URL, TOKEN, csrf_of, fail_jobs

BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def _token(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    return JSONResponse({"csrf": dashboard.csrf_token(request)})


async def _act(request: Request) -> Response:
    return JSONResponse({"acted": (await request.json())["what"]})


def _app(client: Client, **options: object) -> httpx.AsyncClient:
    app = create_app(client, token=TOKEN, **options)  # type: ignore[arg-type]
    app.router.routes[:0] = [Route("/api/csrf", _token),
                             Route("/api/act", _act, methods=["POST"])]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


async def test_a_route_added_later_is_guarded(client: Client) -> None:
    async with _app(client) as http:
        assert (await http.get("/api/csrf")).status_code == 401
        assert (await http.get("/api/csrf", headers={**BEARER, "Host": "evil.example"})
                ).status_code == 400
        token = (await http.get("/api/csrf", headers=BEARER)).json()["csrf"]
        body = {"what": "requeue"}
        refused = await http.post("/api/act", json=body, headers=BEARER)
        assert refused.status_code == 403 and "CSRF" in refused.text
        cross = await http.post("/api/act", json=body,
                                headers={**BEARER, "X-CSRF-Token": token,
                                         "Origin": "http://evil.example"})
        assert cross.status_code == 403
        ok = await http.post("/api/act", json=body, headers={**BEARER, "X-CSRF-Token": token})
        assert ok.status_code == 200 and ok.json() == {"acted": "requeue"}
    async with _app(client, read_only=True) as http:
        token = (await http.get("/api/csrf", headers=BEARER)).json()["csrf"]
        response = await http.post("/api/act", json=body,
                                   headers={**BEARER, "X-CSRF-Token": token})
        assert response.status_code == 403 and "read-only" in response.text


async def test_multipart_forms_and_oversized_bodies(client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    async with _app(client) as http:
        page = await http.get(f"/jobs/{job_id}", headers=BEARER)
        token = csrf_of(page.text)
        response = await http.post(f"/jobs/{job_id}/requeue", headers=BEARER,
                                   files={"csrf": (None, token)})  # multipart/form-data
        assert response.status_code == 303
        wrong = await http.post(f"/jobs/{job_id}/requeue", headers=BEARER,
                                files={"csrf": (None, "0" * 64)})
        assert wrong.status_code == 403
        huge = await http.post(f"/jobs/{job_id}/delete", headers=BEARER,
                               data={"csrf": token, "pad": "x" * MAX_BODY})
        assert huge.status_code == 413
    assert await client.get(job_id) is not None
