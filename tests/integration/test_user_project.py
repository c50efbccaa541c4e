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
from pathlib import Path

import pytest

PROJECT = Path(__file__).parent / "user_project"
ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.timeout(180)


def test_the_user_projects_tests_pass(store_url: str, backend: str) -> None:
    if backend == "mysql":
        pytest.skip("mysql: the user project is a PostgreSQL/SQLite shop (Django's MySQL "
                    "backend needs mysqlclient, which the dev extra does not install)")
    env = {**os.environ, "USER_PROJECT_DATABASE_URL": store_url,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(PROJECT)])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
