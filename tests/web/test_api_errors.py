"""Issue 44 N6: every error under /api/ is JSON of one documented shape,
``{"error": {"code": ..., "message": ...}}``, also the ones the Guard answers itself
(401, 403, unknown host, 413, 429) and the routing's (404, 405); pages keep HTML."""

from __future__ import annotations

from typing import Any

import httpx

from kiln import Client
from kiln.web import create_app
from tests.support.web import BASE_URL, TOKEN

BEARER = {"Authorization": f"Bearer {TOKEN}"}


def _http(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL)


def _check(response: httpx.Response, status: int, code: str, words: str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:200])
    assert response.headers["content-type"] == "application/json", response.text[:200]
    assert response.headers["x-content-type-options"] == "nosniff"
    body = response.json()
    assert set(body) <= {"error", "endpoints"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code, body
    assert words in body["error"]["message"], body


async def test_every_api_error_is_json_of_one_shape(client: Client) -> None:
    async with _http(create_app(client, token=TOKEN)) as http:
        _check(await http.get("/api/jobs"), 401, "unauthorized", "Bearer")
        _check(await http.get("/api/jobs", headers={"Authorization": "Bearer x" * 3}),
               401, "unauthorized", "Authentication required")
        _check(await http.get("/api/jobs", headers={**BEARER, "Host": "evil.test"}),
               400, "unknown_host", "does not answer to the host name")
        _check(await http.post("/api/jobs", headers=BEARER), 403, "csrf", "CSRF token")
        _check(await http.post("/api/jobs", headers={**BEARER, "Origin": "http://evil.test"}),
               403, "cross_origin", "Cross-origin")
        _check(await http.post("/api/jobs", headers=BEARER, content=b"x" * (1 << 20 | 1)),
               413, "too_large", "exceeds")
        _check(await http.get("/api/nothing", headers=BEARER), 404, "not_found",
               "no such endpoint")
        _check(await http.get("/api/jobs/999999", headers=BEARER), 404, "not_found", "999999")
        _check(await http.get("/api/jobs?limit=x", headers=BEARER), 400, "bad_request",
               "limit")
        _check(await http.options("/api/jobs", headers=BEARER), 405, "method_not_allowed", "")
        for i in range(10):
            await http.get("/api/jobs", headers={"Authorization": f"Bearer guess-{i:020}"})
        throttled = await http.get("/api/jobs", headers=BEARER)
        _check(throttled, 429, "too_many_attempts", "try again in")
        assert throttled.headers["retry-after"]
        # the pages keep their HTML
        page = await http.get("/jobs", headers={"Host": "evil.test"})
        assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")


async def test_read_only_and_basic_auth_refusals_are_json(client: Client) -> None:
    async with _http(create_app(client, read_only=True)) as http:
        _check(await http.post("/api/jobs"), 403, "read_only", "read-only")
    async with _http(create_app(client, basic_auth=("alice", "correct horse battery"))) as http:
        refused = await http.get("/api/overview")
        _check(refused, 401, "unauthorized", "basic auth")
        assert refused.headers["www-authenticate"].startswith("Basic")
