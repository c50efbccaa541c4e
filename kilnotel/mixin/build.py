"""Writes (or checks) every generated monitoring file:
``python -m kilnotel.mixin [--config FILE] [--out DIR] [--check]``.

Owns the YAML rendering (block scalars for multi-line PromQL, keys in the order the
generators give) and the list of outputs: ``DIR/alerts/kiln.recording.yml``,
``DIR/alerts/kiln.rules.yml`` and ``DIR/dashboards/*.json``, built from the Config a
YAML or JSON file describes (``config.load``; the defaults without one). ``--check``
writes nothing: it exits 1 and names the files under DIR that differ from what the
generators make now. In kiln's repository ``python -m mixin`` is this with ``--out`` the
repository's root.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kilnotel.mixin import dashboards, recording, rules
from kilnotel.mixin.config import DEFAULT, Config, load


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


def outputs(c: Config, root: Path) -> dict[Path, Callable[[], str]]:
    """Every generated file under ``root`` and how to make its text."""
    files: dict[Path, Callable[[], str]] = {
        root / "alerts" / "kiln.recording.yml": lambda: render_yaml(*recording.document(c)),
        root / "alerts" / "kiln.rules.yml": lambda: render_yaml(*rules.document(c)),
    }
    for name, build in dashboards.boards(c).items():
        files[root / "dashboards" / name] = functools.partial(dashboards.render, build)
    return files


def write(c: Config, root: Path) -> list[Path]:
    written = []
    for path, make in outputs(c, root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make(), encoding="utf-8")
        written.append(path)
    return written


def stale(root: Path, c: Config = DEFAULT) -> list[str]:
    """The generated files that differ from (or are missing in) ``root``."""
    return [str(path.relative_to(root)) for path, make in outputs(c, root).items()
            if not path.exists() or path.read_text(encoding="utf-8") != make()]


def main(argv: list[str] | None = None, prog: str = "python -m kilnotel.mixin") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help="a YAML or JSON file of Config fields (default: the defaults)")
    parser.add_argument("--out", type=Path, default=Path("."), metavar="DIR",
                        help="where alerts/ and dashboards/ go (default: .)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file under DIR differs from the "
                             "generated one")
    args = parser.parse_args(argv)
    try:
        c = load(args.config) if args.config is not None else DEFAULT
    except (OSError, ValueError, TypeError) as exc:
        print(f"{prog}: {args.config}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        out = stale(args.out, c)
        if out:
            print(f"out of date: {', '.join(out)} (run {prog})", file=sys.stderr)
            return 1
        return 0
    for path in write(c, args.out):
        print(path)
    return 0
