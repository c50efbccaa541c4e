"""The user project's own test suite (tests/integration/user_project: a Django shop and
a FastAPI service, tested as their authors would) passes on SQLite and PostgreSQL.

It runs in a process of its own: Django's settings belong to the process, and the
project has its own pytest.ini. About 15 s per database: Django, FastAPI and
SQLAlchemy start-up, migrations, and a real ``manage.py kiln_worker``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.plugins.databases import postgres_schema_url

PROJECT = Path(__file__).parent / "user_project"
ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(params=["sqlite", "postgres"])
def project_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """SQLite and PostgreSQL: the shop is not run on MariaDB (Django's MySQL backend
    needs mysqlclient, which the dev extra does not install)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shop.sqlite3'}"
    else:
        yield from postgres_schema_url()


def test_the_user_projects_tests_pass(project_url: str) -> None:
    store_url = project_url
    env = {**os.environ, "USER_PROJECT_DATABASE_URL": store_url,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(PROJECT)])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    for name in [n for n in env if n.startswith("PYTEST_")]:  # this run's (xdist, addopts)
        del env[name]
    env.pop("KILN_TEST_DATABASE_URL", None)
    if not store_url.startswith("sqlite"):  # kiln.testing's databases on the same server
        env["KILN_TEST_DATABASE_URL"] = store_url
    done = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
