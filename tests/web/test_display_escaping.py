"""Issue 44 N4: bidi overrides, zero-width, NUL and other control characters in error
text, args, metadata, results and in rows written before names were checked display
escaped and marked on every page (``invoice_\\u202egpj.exe`` never reads ``…exe.jpg``),
while a filter posts back its exact text; the CLI shares the same function."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import quote

import httpx

from kiln import Client
from kiln._model._job import AttemptError, JobResult, NewJob, Outcome
from kiln._model._printable import printable
from kiln.cli import _output

RLO, ZWSP, ESC, BEL = "\u202e", "\u200b", "\x1b", "\x07"
RAW = (RLO, ZWSP, ESC, BEL, "\x00", "\u2066")
VALUE = re.compile(r' value="[^"]*"')
KIND, QUEUE = "legacy.\u202eexe.txt", "esc\x1b[31mq"  # written before the name rule


async def _hostile(client: Client) -> tuple[int, int]:
    store = client._store
    failed, done = await store.job_insert_many([
        NewJob(kind=KIND, queue=QUEUE, args={"file": "invoice_\u202egpj.exe", "z": "adm\u200bin"},
               metadata={"who": "\u2066evil\u2069 \x07"}, max_attempts=1),
        NewJob(kind=KIND, queue=QUEUE, args={}, max_attempts=1),
    ])
    rows = {r.id: r for r in await store.job_claim(QUEUE, [KIND], 2, "srv")}
    error = AttemptError(1, time.time(), "bad file invoice_\u202egpj.exe \x1b[31m",
                         "Traceback\n  line \u202e1\n", "srv")
    results = [
        JobResult(failed, "srv", rows[failed].attempt, Outcome.FAILED, error=error),
        JobResult(done, "srv", rows[done].attempt, Outcome.COMPLETED,
                  result=json.dumps({"name": "report\u202efdp.exe"})),
    ]
    assert (await store.job_results_apply(results)).applied == 2
    return int(failed), int(done)


async def test_every_page_shows_control_characters_escaped_and_marked(
        http: httpx.AsyncClient, client: Client) -> None:
    failed, done = await _hostile(client)
    pages = ["/", "/jobs", "/jobs?state=failed", f"/jobs?queue={quote(QUEUE)}", f"/jobs/{failed}",
             f"/jobs/{done}", "/queues", "/kinds", "/servers", "/audit",
             "/jobs/all/delete?state=failed", "/jobs/requeue-all?state=failed"]
    for path in pages:
        response = await http.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        shown = VALUE.sub("", response.text)  # a form's value posts back its exact text
        raw = [f"U+{ord(c):04X}" for c in RAW if c in shown]
        assert raw == [], (path, raw)
    page = (await http.get(f"/jobs/{failed}")).text
    mark = '<mark class=ctl title=U+202E>\\u202e</mark>'
    assert f"invoice_{mark}gpj.exe" in page  # the error and the args
    assert page.count(mark) >= 4  # the error, its traceback, the args and the kind
    assert "<mark class=ctl title=U+200B>\\u200b</mark>" in page
    assert "<mark class=ctl title=U+2066>\\u2066</mark>evil" in page  # the metadata
    assert "<mark class=ctl title=U+001B>\\x1b</mark>[31m" in page
    assert "Traceback\n  line" in page  # newlines stay lines
    assert f"report{mark}fdp.exe" in (await http.get(f"/jobs/{done}")).text
    listing = (await http.get("/jobs?state=failed")).text
    assert f"legacy.{mark}exe.txt" in listing


async def test_a_filter_posts_back_its_exact_text(http: httpx.AsyncClient,
                                                  client: Client) -> None:
    await _hostile(client)
    listing = (await http.get("/jobs", params={"queue": QUEUE})).text
    assert f'<option value="{QUEUE}" selected>' in listing  # the form keeps the text
    assert f'<input type="hidden" name="queue" value="{QUEUE}">' in listing
    assert listing.count('name="ids"') == 2  # and the filter finds both jobs


def test_the_cli_and_the_dashboard_share_one_function() -> None:
    assert _output.printable is printable
    assert printable("a\u202eb\x00\x1b") == "a\\u202eb\\x00\\x1b"
    assert printable("line\nnext", keep="\n") == "line\nnext"
