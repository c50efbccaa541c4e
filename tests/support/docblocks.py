"""The tests' one reader of the code blocks in the docs (docs/*.md).

A fenced block is `````lang`` ... `````; a block may be named by the HTML comment on the
line right above its fence (``<!-- cancel-cooperative-handler -->``). The tests that run
the docs' examples find them here:

- ``code_blocks("guide.md", after="<!-- tested: tests/test_guide_tags.py")``: the
  python blocks after a marker, in order;
- ``marked_block("operating.md", "queue-controls")``: the one block under that comment;
- ``blocks_under_test("guide.md", __file__)``: the python blocks after the marker
  ``<!-- tested: tests/<this test file>``;
- ``blocks("integrations.md")``: every block with its language and its comment;
- ``example_app("operating.md", "cooperative-sync-handler", url)``: the ``app`` that the
  marked block builds, on ``url`` instead of the example's ``sqlite:///kiln.db``.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import kiln

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_FENCE = re.compile(r"(?:<!-- ([^\n]*?) -->\n)?```(\w*)\n(.*?)```", re.S)


@dataclasses.dataclass(frozen=True)
class Block:
    lang: str  # the fence's language ("" when it names none)
    code: str  # the text between the fences, with its final newline
    marker: str | None  # the HTML comment right above the fence, without <!-- -->


def _path(doc: str | Path) -> Path:
    return doc if isinstance(doc, Path) else DOCS / doc


def blocks(doc: str | Path, *, after: str | None = None) -> list[Block]:
    """Every fenced block of ``doc`` (a path, or a file name in docs/), in order; with
    ``after``, only the blocks after the first occurrence of that text."""
    text = _path(doc).read_text(encoding="utf-8")
    if after is not None:
        text = text[text.index(after):]
    return [Block(lang, code, marker) for marker, lang, code in _FENCE.findall(text)
            for marker in [marker or None]]


def code_blocks(doc: str | Path, lang: str = "python", *, after: str | None = None) -> list[str]:
    """The code of ``doc``'s blocks of language ``lang``, in order (see ``blocks``)."""
    return [b.code for b in blocks(doc, after=after) if b.lang == lang]


def marked_block(doc: str | Path, marker: str, lang: str = "python") -> str:
    """The code of the one ``lang`` block right under ``<!-- marker -->`` in ``doc``."""
    found = [b.code for b in blocks(doc) if b.marker == marker and b.lang == lang]
    assert len(found) == 1, f"{doc} has {len(found)} {lang} blocks under <!-- {marker} -->"
    return found[0]


def blocks_under_test(doc: str | Path, test_file: str) -> list[str]:
    """The python blocks of ``doc`` after ``<!-- tested: tests/...`` naming ``test_file``
    (the calling test module's ``__file__``)."""
    name = Path(test_file).resolve().relative_to(ROOT).as_posix()
    return code_blocks(doc, after=f"<!-- tested: {name}")


def example_app(doc: str | Path, marker: str, url: str) -> kiln.App:
    """Run the python block under ``<!-- marker -->`` in ``doc``, which builds ``app`` on
    ``sqlite:///kiln.db``, on the database at ``url`` instead; return that app."""
    code = marked_block(doc, marker)
    assert 'kiln.App("sqlite:///kiln.db")' in code
    namespace: dict[str, Any] = {"__name__": f"example_{marker.replace('-', '_')}"}
    exec(compile(code.replace("sqlite:///kiln.db", url), str(_path(doc)), "exec"), namespace)
    app = namespace["app"]
    assert isinstance(app, kiln.App)
    return app
