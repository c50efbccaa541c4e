"""The ``kiln`` command: parses the command line, runs one command, maps errors to exit codes.

Exit codes: 0 success, 2 usage error (bad flags, bad input, invalid configuration),
1 anything else (database unreachable or not migrated, job not found or finished
already, a crash).
Every failure prints one line on stderr; set KILN_DEBUG=1 for a traceback of
unexpected errors. Each command group lives in its own module; this one only
dispatches.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence

from kiln._errors import (
    ConfigError,
    JobFinishedError,
    JobNotFoundError,
    KilnError,
    ValidationError,
)
from kiln._version import VERSION
from kiln.cli._argparse import Parser, UsageError, database_options

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


def build_parser() -> Parser:
    from kiln.cli import (
        check_deploy,
        dashboard,
        demo,
        enqueue,
        exporter,
        jobs,
        kinds,
        migrate,
        mixin,
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
    for module in (migrate, enqueue, jobs, kinds, worker, exporter, servers, queues, dashboard,
                   retry_window, demo, mixin):
        module.register(commands, common)
    check_deploy.register(commands, common)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _configure_logging(getattr(args, "log_level", None))
        code: int = args.func(args)
        return code
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    except UsageError as exc:
        return _fail(str(exc), EXIT_USAGE)
    except (JobNotFoundError, JobFinishedError) as exc:  # the input was right, the job not
        return _fail(str(exc), EXIT_ERROR)
    except (ConfigError, ValidationError) as exc:
        return _fail(str(exc), EXIT_USAGE)
    except KilnError as exc:
        return _fail(str(exc), EXIT_ERROR)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except BrokenPipeError:
        # the reader went away (``kiln jobs list | head``): not an error worth a message
        sys.stderr.close()
        return EXIT_ERROR
    except Exception as exc:
        if os.environ.get("KILN_DEBUG"):
            traceback.print_exc()
        hint = "" if os.environ.get("KILN_DEBUG") else " (set KILN_DEBUG=1 for a traceback)"
        return _fail(f"unexpected {type(exc).__name__}: {exc}{hint}", EXIT_ERROR)


def _configure_logging(level: str | None) -> None:
    """Library warnings (a driver retrying, say) must not clutter an admin command's output:
    commands log errors only, unless they choose a level or KILN_LOG_LEVEL does."""
    chosen = (level or os.environ.get("KILN_LOG_LEVEL") or "error").upper()
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(chosen)  # some libraries set their own logger levels (psycopg: WARNING)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=chosen, handlers=[handler])


def _fail(message: str, code: int) -> int:
    first_line = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"kiln: error: {first_line}", file=sys.stderr)
    return code


def main() -> None:
    """Console entry point (``kiln = "kiln.cli:main"``)."""
    sys.exit(run())


__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "run"]
