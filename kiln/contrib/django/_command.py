"""What the kiln management commands share: running a ``kiln`` command line on the
app and database the KILN setting names, passing unknown flags through."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from django.core.management.base import BaseCommand, CommandError, handle_default_options

from kiln.contrib.django._settings import database_url, kiln_settings


def app_spec(given: str | None) -> str:
    spec = given or kiln_settings()["APP"]
    if not spec:
        raise CommandError('name your kiln.App: KILN = {"APP": "module:attribute"} or --app')
    return str(spec)


def run_kiln(argv: Sequence[str]) -> None:
    from kiln.cli import run

    code = run(list(argv))
    if code:
        raise CommandError(f"kiln {argv[0]} failed (exit {code})", returncode=code)


class PassThrough(BaseCommand):  # type: ignore[misc]  # django has no stubs
    """A command whose flags Django does not know go to the kiln command as they are."""

    def run_from_argv(self, argv: list[str]) -> None:
        parser = self.create_parser(argv[0], argv[1])
        options, rest = parser.parse_known_args(argv[2:])
        handle_default_options(options)
        try:
            self.handle(*rest, **vars(options))
        except CommandError as exc:
            self.stderr.write(str(exc))
            sys.exit(exc.returncode)

    def kiln_argv(self, rest: Sequence[str], options: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def handle(self, *rest: str, **options: Any) -> None:
        run_kiln(self.kiln_argv(rest, options))


def url(options: dict[str, Any]) -> list[str]:
    return ["--database-url", database_url(options.get("database"))]
