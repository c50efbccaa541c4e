"""Writes (or checks) every generated monitoring file: ``python -m mixin [--check]``.

Owns the YAML rendering (block scalars for multi-line PromQL, keys in the order the
generators give) and the list of outputs. ``--check`` exits 1 and names the files that
differ from what the generators make now.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from mixin import dashboards, recording, rules
from mixin.config import DEFAULT, Config

ROOT = Path(__file__).resolve().parents[1]


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_yaml(header: str, data: dict[str, Any]) -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=1000,
                     allow_unicode=True, default_flow_style=False)
    return header + body


def outputs(c: Config, root: Path = ROOT) -> dict[Path, Callable[[], str]]:
    """Every generated file under ``root`` and how to make its text."""
    files: dict[Path, Callable[[], str]] = {
        root / "alerts" / "kiln.recording.yml": lambda: render_yaml(*recording.document(c)),
        root / "alerts" / "kiln.rules.yml": lambda: render_yaml(*rules.document(c)),
    }
    for name, build in dashboards.boards(c).items():
        files[root / "dashboards" / name] = functools.partial(dashboards.render, build)
    return files


def write(c: Config, root: Path = ROOT) -> list[Path]:
    written = []
    for path, make in outputs(c, root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make(), encoding="utf-8")
        written.append(path)
    return written


def stale(c: Config = DEFAULT, root: Path = ROOT) -> list[str]:
    """The generated files that differ from (or are missing in) ``root``."""
    return [str(path.relative_to(root)) for path, make in outputs(c, root).items()
            if not path.exists() or path.read_text(encoding="utf-8") != make()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mixin", description=__doc__)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a checked-in file differs from the generated one")
    args = parser.parse_args(argv)
    if args.check:
        out = stale()
        if out:
            print(f"out of date: {', '.join(out)} (run python -m mixin)", file=sys.stderr)
            return 1
        return 0
    write(DEFAULT)
    return 0
