"""Numbered migration files, read from a store package's ``migrations`` folder.

Versions are the same across dialects: 0001 means the same schema everywhere.
"""

from __future__ import annotations

import importlib.resources
import re

_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def load(package: str) -> list[tuple[int, str]]:
    """Return (version, sql) pairs of ``package``.migrations, in order."""
    folder = importlib.resources.files(package) / "migrations"
    found: list[tuple[int, str]] = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.read_text(encoding="utf-8")))
    found.sort()
    return found


def latest(package: str) -> int:
    versions = load(package)
    return versions[-1][0] if versions else 0


def split_statements(sql: str) -> list[str]:
    """Split a migration on semicolons, except inside ``$$ ... $$`` bodies."""
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    statements: list[str] = []
    current: list[str] = []
    for part in "\n".join(lines).split(";"):
        current.append(part)
        if "".join(current).count("$$") % 2 == 0:  # not inside a dollar-quoted body
            statement = ";".join(current).strip()
            if statement:
                statements.append(statement)
            current = []
    if current and ";".join(current).strip():
        statements.append(";".join(current).strip())
    return statements
