"""``manage.py kiln_worker [--queue NAME[=N]] [any kiln worker flag]``: ``kiln worker``
for KILN["APP"] on the KILN database, until SIGTERM or SIGINT. When ``TASKS`` names
kiln's backend, it first imports the tasks (kiln.contrib.django.tasks.discover), and
without KILN["APP"] runs the App the tasks are kinds of."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kiln.contrib.django._command import PassThrough, app_spec
from kiln.contrib.django._settings import kiln_settings

BACKEND = "kiln.contrib.django.tasks.KilnBackend"


def runs_tasks() -> bool:
    from django.conf import settings

    tasks = getattr(settings, "TASKS", None) or {}
    return any(params.get("BACKEND") == BACKEND for params in tasks.values())


class Command(PassThrough):
    help = "Run a kiln worker for KILN['APP'] (kiln worker; its flags pass through)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--app", help="module:attribute of the kiln.App (default: "
                            "KILN['APP'], else the Django tasks' App)")
        parser.add_argument("--queue", action="append", default=[],
                            help="NAME[=CONCURRENCY], repeatable")

    def kiln_argv(self, rest: Sequence[str], options: dict[str, Any]) -> list[str]:
        given = options.get("app")
        if runs_tasks():
            from kiln.contrib.django.tasks import discover

            discover()
            if not given and not kiln_settings()["APP"]:
                given = "kiln.contrib.django.tasks:app"
        queues = [flag for q in options.get("queue") or [] for flag in ("--queue", q)]
        # no --database-url: the App was built on the KILN database already
        return ["worker", app_spec(given), *queues, *rest]
