"""``manage.py kiln_migrate [--status | --sql] [--database ALIAS]``: ``kiln migrate`` on
the KILN database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.contrib.django._command import PassThrough, url


class Command(PassThrough):
    help = "Create or upgrade kiln's tables in the KILN database (kiln migrate)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--database", help="a DATABASES alias (default: KILN['DATABASE'])")
        parser.add_argument("--status", action="store_true", help="list applied and pending")
        parser.add_argument("--sql", action="store_true", help="print the pending SQL")

    def kiln_argv(self, rest: Sequence[str], options: dict[str, Any]) -> list[str]:
        flags = [f"--{name}" for name in ("status", "sql") if options.get(name)]
        return ["migrate", *url(options), *flags, *rest]
