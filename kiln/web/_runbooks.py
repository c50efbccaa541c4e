"""``/runbooks``: the runbook of every alert of kiln's monitoring mixin, served by the
dashboard, so that an alert's ``runbook_url`` can point at something every installation
has (``kiln_dashboard_url`` in the mixin's config).

Owns a small Markdown renderer for what docs/runbooks.md uses (headings with GitHub's
anchors, paragraphs, bullet lists, ``code``, **bold**, links) and nothing more.
``runbooks.md`` beside this module is a copy of docs/runbooks.md (tests/web checks they
are the same).
"""

from __future__ import annotations

import functools
import html
import re
from importlib import resources

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import Response

from kiln.web._dashboard import Dashboard

_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as ``-``."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def _inline(text: str) -> str:
    out, last = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[last:m.start()]))
        code, bold, label, url = m.groups()
        if code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{_inline(bold)}</strong>")
        elif url.startswith(("http://", "https://", "#")):
            out.append(f'<a href="{html.escape(url)}">{_inline(label)}</a>')
        else:  # a page of kiln's docs, not served here: name it
            out.append(f"{_inline(label)} (docs/{html.escape(url)})")
        last = m.end()
    out.append(html.escape(text[last:]))
    return "".join(out)


def render(markdown: str) -> Markup:
    """The HTML of ``markdown`` (the subset docs/runbooks.md uses)."""
    out: list[str] = []
    para: list[str] = []
    items: list[list[str]] = []

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_inline(' '.join(i))}</li>" for i in items)
                       + "</ul>")
            items.clear()

    for line in markdown.splitlines():
        stripped = line.strip()
        heading = re.match(r"^(#{1,4}) (.+)$", line)
        if heading:
            flush()
            level, text = len(heading.group(1)), heading.group(2).strip()
            out.append(f'<h{level} id="{anchor(text)}">{_inline(text)}</h{level}>')
        elif not stripped:
            flush()
        elif line.startswith("- "):
            if para:
                flush()
            items.append([line[2:].strip()])
        elif items and line.startswith("  "):
            items[-1].append(stripped)
        else:
            if items:
                flush()
            para.append(stripped)
    flush()
    return Markup("\n".join(out))


@functools.cache
def page() -> Markup:
    text = resources.files("kiln.web").joinpath("runbooks.md").read_text(encoding="utf-8")
    return render(text)


async def runbooks(request: Request) -> Response:
    dashboard: Dashboard = request.app.state.kiln
    return dashboard.render(request, "runbooks.html", title="Runbooks", nav="runbooks",
                            body=page())
