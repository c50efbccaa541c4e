"""/runbooks: the dashboard serves the runbook of every alert, at the anchor the
monitoring mixin links with ``kiln_dashboard_url`` (M-10's working default)."""

from __future__ import annotations

import html
from pathlib import Path

import httpx

from kiln.web import _runbooks
from kilnotel.mixin.config import Config
from tests.ops import promql

ROOT = Path(__file__).resolve().parents[2]


def test_the_packaged_runbooks_are_the_docs() -> None:
    packaged = ROOT / "kiln" / "web" / "runbooks.md"
    assert packaged.read_bytes() == (ROOT / "docs" / "runbooks.md").read_bytes(), (
        "cp docs/runbooks.md kiln/web/runbooks.md")


async def test_every_alert_links_its_section_on_the_dashboard(http: httpx.AsyncClient) -> None:
    response = await http.get("/runbooks")
    assert response.status_code == 200
    page = response.text
    config = Config(kiln_dashboard_url="https://kiln.example.com/")
    for rule in promql.alerts():
        url = config.runbook(rule["alert"])
        assert url == f"https://kiln.example.com/runbooks#{rule['alert'].lower()}"
        assert f'id="{url.split("#")[1]}"' in page, rule["alert"]
    assert "<h2 " in page and "<ul>" in page and "<code>" in page and "<strong>" in page


def test_the_markdown_is_escaped_and_links_stay_inside() -> None:
    out = _runbooks.render("## A <b> heading\n\n- `<script>` and **bold**\n  more\n\n"
                           "See [ops](operating.md#x) and [web](https://x.example/a).\n")
    assert '<h2 id="a-b-heading">A &lt;b&gt; heading</h2>' in out
    assert "<li><code>&lt;script&gt;</code> and <strong>bold</strong> more</li>" in out
    assert "ops (docs/operating.md#x)" in out  # a docs page the dashboard does not serve
    assert '<a href="https://x.example/a">web</a>' in out
    assert html.escape("<script>") in out and "<script>" not in out
