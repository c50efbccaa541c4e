"""docs/operating.md keeps kiln's defaults: its table lists every ServerConfig field with
the default kiln._server._config.DEFAULTS has, in the units the CLI accepts."""

from __future__ import annotations

import dataclasses
import re

from kiln._server._config import DEFAULTS, ServerConfig
from kiln.cli._server_config import parse_value
from tests.support.deploy import ROOT

OPERATING = ROOT / "docs" / "operating.md"
DAY = 86400.0


def documented() -> dict[str, str]:
    text = OPERATING.read_text(encoding="utf-8")
    table = text.split("<!-- defaults:begin -->")[1].split("<!-- defaults:end -->")[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, re.M)
    return {name: value.strip() for name, value in rows}


def value_of(field: dataclasses.Field[object], text: str) -> object:
    if text.endswith("d") and text[:-1].isdigit():
        return float(text[:-1]) * DAY
    return parse_value(field, text, "--docs")


def test_every_default_is_documented_as_kiln_has_it() -> None:
    rows = documented()
    assert list(rows) == list(DEFAULTS)
    for field in dataclasses.fields(ServerConfig):
        assert value_of(field, rows[field.name]) == DEFAULTS[field.name], field.name


def test_the_guide_names_the_figures_it_was_promised() -> None:
    text = OPERATING.read_text(encoding="utf-8")
    for needed in ("3*heartbeat_interval + kill_grace + 5s", "shutdown_timeout + kill_grace",
                   "bench.bench_rescue", "bench.bench_foreign_claim", "idle-cost.md",
                   "9 connections per process", "kiln check-deploy"):
        assert needed in text, needed
