"""``kiln mixin``: write the monitoring mixin's Prometheus rules and Grafana board from a
config file; the same as ``python -m kilnotel.mixin`` (kilnotel is imported lazily, as
for ``kiln exporter``)."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from kiln.cli.metrics import MetricsUnavailableError, load_kilnotel


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser(
        "mixin", help="write the Prometheus rules and Grafana board for kiln",
        description="Write alerts/kiln.recording.yml, alerts/kiln.rules.yml and "
        "dashboards/kiln-overview.json under --out from the defaults or a YAML/JSON file of "
        "kilnotel.mixin.config.Config fields (thresholds, deployment labels, routing: extra "
        "alert labels and annotations, runbook URL pattern, dashboard URL and links). "
        "It needs the otel extra.",
    )
    parser.add_argument("--config", metavar="FILE", help="the mixin's config file")
    parser.add_argument("--out", default=".", metavar="DIR",
                        help="where alerts/ and dashboards/ go (default: .)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file under --out differs")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    load_kilnotel("kiln mixin")
    try:
        build = importlib.import_module("kilnotel.mixin.build")
    except ImportError as exc:  # an older kilnotel, or no pyyaml
        raise MetricsUnavailableError(
            f"kiln mixin needs kilnotel.mixin ({exc}): pip install 'kiln-jobs[otel]'"
        ) from exc
    argv = ["--out", args.out, *(["--config", args.config] if args.config else []),
            *(["--check"] if args.check else [])]
    code: int = build.main(argv, prog="kiln mixin")
    return code
