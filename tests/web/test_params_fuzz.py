"""Every bad parameter is a 400 with the security headers, never a 5xx (issue 21, defect 9).

The named cases are the ones a probe found; the property test throws arbitrary text
at every route's query string, path parameters and form fields, on every store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from kiln import Client
from kiln.web import create_app
from kiln.web._dashboard import SECURITY_HEADERS
from tests.support.web import csrf_of, fail_jobs

T = TypeVar("T")
GET_ROUTES = ("/", "/jobs", "/jobs/requeue-all", "/queues", "/servers", "/recurring",
              "/rate-limits", "/audit", "/login")
PARAMS = ("state", "queue", "kind", "error", "before", "limit", "done", "n", "next", "ids",
          "action", "max_id", "as_of")
NASTY = ("--5", "--1", "-1", "0", "²", "٣", "1e3", "0x10", " 7 ", "9" * 30, str(2**63),
         str(-(2**63) - 1), "\x00", "a\x00b", "%00", "\u202e", "💥", "' OR 1=1 --", "",
         "failed\x00", "1.5", "+5", "١٢")
SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
text = st.one_of(st.sampled_from(NASTY),
                 st.text(st.characters(exclude_categories=["Cs"]), max_size=40))
queries = st.dictionaries(st.one_of(st.sampled_from(PARAMS), text), text, max_size=5)


def _ok_headers(response: httpx.Response, what: object = None) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, (what, name)


def _ok(response: httpx.Response, what: object) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:300])
    _ok_headers(response, what)


async def test_the_probes_cases_are_400s_with_headers(http: httpx.AsyncClient,
                                                      client: Client) -> None:
    [job_id] = await fail_jobs(client, 1)
    bad = ["/jobs?limit=--5", "/jobs?before=--1", "/jobs/--1", "/jobs/%C2%B2",
           "/jobs?limit=%C2%B2", "/jobs?before=" + "9" * 30, f"/jobs?before={2**63}",
           "/jobs?queue=a%00b", "/jobs?state=failed%00", "/audit?limit=--5",
           "/jobs/requeue-all?state=failed&queue=%00", "/jobs/requeue-all?before=--1",
           "/jobs/99999999999999999999", "/jobs/0", "/jobs/1.5"]
    for path in bad:
        response = await http.get(path)
        assert response.status_code == 400, (path, response.status_code)
        _ok(response, path)
    flash = await http.get("/jobs?done=requeue&n=%C2%B2")  # an unusable flash is left out
    assert flash.status_code == 200 and "requeued" not in flash.text
    token = csrf_of((await http.get("/jobs")).text)
    for data in ({"action": "requeue", "ids": "--1"}, {"action": "requeue", "ids": "²"},
                 {"action": "delete", "ids": ["1", "٣"]}, {"action": "\x00", "ids": "1"}):
        response = await http.post("/jobs/bulk", data={**data, "csrf": token})
        assert response.status_code == 400, data
        _ok(response, data)
    for path in ("/jobs/--1/requeue", "/jobs/%C2%B2/delete"):
        response = await http.post(path, data={"csrf": token})
        assert response.status_code == 400, path
        _ok(response, path)
    assert await client.get(job_id) is not None


def _in_loop(loop: asyncio.AbstractEventLoop, call: Awaitable[T]) -> T:
    return asyncio.run_coroutine_threadsafe(call, loop).result(timeout=30)  # type: ignore[arg-type]


async def test_no_query_string_or_path_gets_a_5xx(http: httpx.AsyncClient,
                                                  client: Client) -> None:
    await fail_jobs(client, 2)
    loop = asyncio.get_running_loop()

    @SETTINGS
    @given(route=st.sampled_from(GET_ROUTES), query=queries)
    def query_strings(route: str, query: dict[str, str]) -> None:
        url = route + "?" + urlencode(query)
        _ok(_in_loop(loop, http.get(url)), url)

    @SETTINGS
    @given(segment=text, action=text, query=queries)
    def paths(segment: str, action: str, query: dict[str, str]) -> None:
        url = f"/jobs/{quote(segment, safe='')}?{urlencode(query)}"
        _ok(_in_loop(loop, http.get(url)), url)
        if segment and action:
            url = f"/jobs/{quote(segment, safe='')}/{quote(action, safe='')}"
            _ok(_in_loop(loop, http.post(url, data={"csrf": token})), url)

    token = csrf_of((await http.get("/jobs")).text)
    await asyncio.to_thread(query_strings)
    await asyncio.to_thread(paths)


async def test_no_form_gets_a_5xx(http: httpx.AsyncClient, client: Client) -> None:
    await fail_jobs(client, 2)
    loop = asyncio.get_running_loop()
    token = csrf_of((await http.get("/jobs")).text)
    values = st.one_of(text, st.lists(text, max_size=3))
    forms = st.builds(
        lambda fixed, extra: {**extra, **fixed},
        st.fixed_dictionaries({"ids": values, "action": st.sampled_from(
            ("requeue", "cancel", "delete", "", "\x00"))}),
        st.dictionaries(st.one_of(st.sampled_from(PARAMS), text), values, max_size=4),
    )

    @SETTINGS
    @given(route=st.sampled_from(("/jobs/bulk", "/jobs/requeue-all", "/login")), form=forms)
    def posts(route: str, form: dict[str, Any]) -> None:
        _ok(_in_loop(loop, http.post(route, data={**form, "csrf": token})), (route, form))

    await asyncio.to_thread(posts)


async def test_a_bug_in_a_route_is_a_500_with_the_headers(make_http: Any,
                                                          client: Client) -> None:
    async def broken(_request: Request) -> Response:
        raise RuntimeError("secret internals")

    app = create_app(client)
    app.router.routes.append(Route("/broken", broken))  # a route added later is covered
    http = make_http(app=app)
    response = await http.get("/broken")
    assert response.status_code == 500
    assert "secret internals" not in response.text and "log has the details" in response.text
    _ok_headers(response)
