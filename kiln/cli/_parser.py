"""The argument parser: global options, one sub-command per command module.

Usage errors raise UsageError (one line, exit code 2) instead of argparse's
usage dump, so scripts see the same shape of message for every failure.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

from kiln._version import VERSION


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


def build_parser() -> Parser:
    from kiln.cli import (
        check_deploy,
        dashboard,
        demo,
        enqueue,
        jobs,
        kinds,
        migrate,
        queues,
        retry_window,
        servers,
        worker,
    )

    common = database_options()
    parser = Parser(
        prog="kiln",
        description="kiln: a durable job runner for Python that operators can see into.",
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"kiln {VERSION}")
    commands = parser.add_subparsers(
        title="commands", metavar="COMMAND", required=True, parser_class=Parser
    )
    for module in (migrate, enqueue, jobs, kinds, worker, servers, queues, dashboard,
                   retry_window, demo):
        module.register(commands, common)
    check_deploy.register(commands, common)
    return parser
