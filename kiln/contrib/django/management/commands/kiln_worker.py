"""``manage.py kiln_worker [--queue NAME[=N]] [any kiln worker flag]``: ``kiln worker``
for KILN["APP"] on the KILN database, until SIGTERM or SIGINT."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.contrib.django._command import PassThrough, app_spec


class Command(PassThrough):
    help = "Run a kiln worker for KILN['APP'] (kiln worker; its flags pass through)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--app", help="module:attribute of the kiln.App (default: "
                            "KILN['APP'])")
        parser.add_argument("--queue", action="append", default=[],
                            help="NAME[=CONCURRENCY], repeatable")

    def kiln_argv(self, rest: Sequence[str], options: dict[str, Any]) -> list[str]:
        queues = [flag for q in options.get("queue") or [] for flag in ("--queue", q)]
        # no --database-url: the App was built on the KILN database already
        return ["worker", app_spec(options.get("app")), *queues, *rest]
