"""``kiln retry-window``: how long a kind keeps retrying, from its policy and max_attempts.

The window is the sum of the waits between attempts (see kiln.retry_window); with
Exponential(2s, 2m) and 12 attempts it is six to twelve minutes.
"""

from __future__ import annotations

import argparse
from typing import Any

from kiln._model._retry import Backoff, Constant, Exponential, retry_window
from kiln.cli import _output as out


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "retry-window", help="print the shortest and longest total retry window of a policy",
        description="The shortest and longest total wait between the first and the last "
        "attempt of a job, for a backoff policy and max_attempts. Needs no database.",
    )
    parser.add_argument("--backoff", choices=("exponential", "constant"), default="exponential")
    parser.add_argument("--base", type=float, default=1.0, metavar="SECONDS",
                        help="exponential: the first wait; constant: every wait (default: 1)")
    parser.add_argument("--max", type=float, default=3600.0, metavar="SECONDS",
                        help="exponential: the longest single wait (default: 3600)")
    parser.add_argument("--max-attempts", type=int, default=25, metavar="N",
                        help="attempts in all (default: 25)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run)


def policy_of(args: argparse.Namespace) -> Backoff:
    if args.backoff == "constant":
        return Constant(args.base)
    return Exponential(args.base, args.max)


def run(args: argparse.Namespace) -> int:
    policy = policy_of(args)
    shortest, longest = retry_window(policy, args.max_attempts)
    waits = max(args.max_attempts - 1, 0)
    if args.json:
        out.print_json({
            "policy": getattr(policy, "to_json", dict)(),
            "max_attempts": args.max_attempts,
            "waits": waits,
            "shortest_seconds": shortest,
            "longest_seconds": longest,
        })
        return 0
    print(f"shortest {out.duration(shortest)} ({shortest:g}s), "
          f"longest {out.duration(longest)} ({longest:g}s) "
          f"over {waits} wait{'s' * (waits != 1)} between {args.max_attempts} attempts")
    return 0
