"""docs/guide.md, "Unique jobs": its block runs as written, on every store."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import kiln

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"


def test_the_guides_unique_block(store_url: str) -> None:
    text = GUIDE.read_text()
    marked = text[text.index("<!-- tested: tests/test_guide_unique.py"):]
    [block] = re.findall(r"```python\n(.*?)```", marked, re.S)[:1]
    namespace: dict[str, Any] = {"kiln": kiln, "url": store_url, "timedelta": timedelta}
    try:
        exec(block, namespace)
        app: kiln.App = namespace["app"]
        digest = namespace["digest"]
        assert digest.inserted
        again = app.enqueue("report.build", {"tenant": 1}, unique=namespace["hourly"])
        assert again == digest and not again.inserted
    finally:
        if "app" in namespace:
            namespace["app"].close()
