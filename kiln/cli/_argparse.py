"""The argument parser's parts every command module uses: the parser class, its usage
error, and the global ``--database-url`` option. A leaf: the commands import it, and
``kiln.cli.build_parser`` assembles them.

Usage errors raise UsageError (one line, exit code 2) instead of argparse's
usage dump, so scripts see the same shape of message for every failure.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class UsageError(Exception):
    """A malformed command line; the CLI exits with code 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def database_options() -> Parser:
    """``--database-url``, accepted before or after the sub-command."""
    parent = Parser(add_help=False)
    parent.add_argument(
        "--database-url",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="sqlite:///path.db, postgresql://... or mysql://... "
        "(default: $KILN_DATABASE_URL, else sqlite:///kiln.db in the working directory)",
    )
    return parent
