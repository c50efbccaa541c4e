"""Shared fixtures: one store per test on every backend.

PostgreSQL: KILN_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test),
a fresh schema per test. MySQL/MariaDB: KILN_TEST_MYSQL_URL (default
mysql://root@127.0.0.1:3306/test), a fresh database per test.
With CI=true a missing database fails the run instead of skipping.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.plugins.databases", "tests.plugins.exclusive", "tests.plugins.pgbouncer",
    "tests.plugins.tiers", "tests.plugins.diagnose",
    "pytester",  # pytester: tests/testing
]
